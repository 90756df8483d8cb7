"""docs/reproducing_a_submission.md is run, so that a command it shows cannot stop working unseen.

The page's conventions, read here:
- A ```sh block after the line `<!-- cpu -->` needs no GPU, container or data: it runs in an empty folder with
  bash -e, TOOLKIT and PYTHONPATH set to this repository and this Python first on PATH, and must exit 0
  (`<!-- cpu: exit 2 -->`: that status; `<!-- cpu: slow -->`: minutes, run in the slow tier only;
  `<!-- cpu: demo -->`: a small default's whole run, whose launcher path the small defaults' end-to-end tests
  run, in the opt-in demo tier only: `-m demo`). A ```text block right after it shows lines of its output:
  each must be found in one output line, `...` standing for text left out.
- Every other ```sh block needs the GPU machine (Docker, SLURM, the real data): it must parse (bash -n), and
  every config_*.sh it sources passes the launcher's config stage (scripts/run_common.sh: load_config,
  config_env) and the trainer's config check, as tests/launch/test_published_configs.py runs them; a bare
  name is each file of that name among the published configs (tests/data/published) and ours (configs/).
- A table whose first column is "not applicable here" names, per benchmark section, only names the vendor
  vocabulary (training/common/vendor_vars.py) has as not applicable for that benchmark.
- The table of what cannot run names a published config (and the settings added to it) and quotes what the
  config stage says of it: the quote must be among its problems or its not-applicable reasons.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.launch.helpers import stage_env
from tests.launch.test_published_configs import trainer_config
from training.common import vendor_vars

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reproducing_a_submission.md"
PUBLISHED = REPO / "tests" / "data" / "published"
MARK = re.compile(r"<!--\s*cpu(?::\s*(?P<opts>.*?))?\s*-->")
SECTIONS = {"BERT": "bert", "Llama 2 70B LoRA": "llama2_70b_lora", "Llama 3.1 8B": "llama31_8b"}


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    end: int  # of the closing fence
    lang: str
    code: str
    section: str  # the "## " heading it lies under
    cpu: bool = False
    status: int = 0
    slow: bool = False
    demo: bool = False
    shown: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"line{self.line}"


def parse(text: str) -> list[Block]:
    """The page's fenced blocks, each with the cpu marker before it and the ```text block shown after it."""
    lines = text.splitlines()
    out: list[Block] = []
    section, i = "", 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section = lines[i][3:].strip()
        if not lines[i].startswith("```"):
            i += 1
            continue
        start = i
        i = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
        code = "\n".join(lines[start + 1 : i]) + "\n"
        block = Block(start + 1, i + 1, lines[start][3:].strip(), code, section)
        i += 1
        prev = out[-1] if out else None
        between = lines[prev.end : start] if prev else []
        if block.lang == "text" and prev and prev.cpu and not any(line.strip() for line in between):
            prev.shown = tuple(line for line in block.code.splitlines() if line.strip())
            continue
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.fullmatch(before.strip())
        if mark:
            opts = [o.strip() for o in (mark.group("opts") or "").split(",")]
            block.cpu, block.demo = True, "demo" in opts
            block.slow = block.demo or "slow" in opts
            block.status = next((int(o.split()[1]) for o in opts if o.startswith("exit ")), 0)
        out.append(block)
    return out


BLOCKS = parse(DOC.read_text())
CPU = [b for b in BLOCKS if b.cpu and b.lang == "sh"]
GPU = [b for b in BLOCKS if not b.cpu and b.lang == "sh"]


def found(shown: str, output: list[str]) -> bool:
    """`shown`'s pieces between `...` occur, in order, in one line of `output`."""
    pieces = [p.strip() for p in shown.split("...") if p.strip()]
    for line in output:
        at = 0
        for piece in pieces:
            at = line.find(piece, at)
            if at < 0:
                break
            at += len(piece)
        else:
            return True
    return False


def environment(tmp: Path) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "TOOLKIT": str(REPO),
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(tmp),
    }


def run_block(block: Block, tmp: Path) -> None:
    done = subprocess.run(
        ["bash", "-e", "-c", block.code],
        cwd=tmp,
        env=environment(tmp),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = (done.stdout + done.stderr).splitlines()
    said = "\n".join(output[-60:])
    assert done.returncode == block.status, f"{DOC.name}:{block.line} exit {done.returncode}\n{said}"
    missing = [line for line in block.shown if not found(line, output)]
    assert missing == [], f"{DOC.name}:{block.line}: not in its output: {missing}\n{said}"


def test_the_page_marks_what_runs_here_and_shows_its_output():
    assert len(CPU) >= 6 and all(b.shown for b in CPU if not b.slow)
    assert {b.section for b in CPU} >= set(SECTIONS)
    for block in CPU:
        if "run_with_docker.sh" in block.code:
            assert "CONTAINER_RUNTIME=none" in block.code and "LOGDIR=" in block.code, block.line


@pytest.mark.parametrize("block", [b for b in CPU if not b.slow], ids=lambda b: b.id)
def test_a_cpu_command_runs_as_shown(block, tmp_path):
    run_block(block, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[pytest.mark.demo] if b.demo else []) for b in CPU if b.slow],
    ids=lambda b: b.id,
)
def test_a_slow_cpu_command_runs_as_shown(block, tmp_path):
    run_block(block, tmp_path)


SOURCED = re.compile(r"^\s*(?:source|\.)\s+(\S*config_[^\s;&|]+\.sh)", re.M)
STAGE = r"""
REPO_DIR=$1 RUNNER=walkthrough
source "${REPO_DIR}/scripts/run_common.sh"
export CONFIG_FILE=$2
load_config >/dev/null && config_env >/dev/null && env -0
"""


def configs_named(word: str) -> list[Path]:
    """The files a `source WORD` of the page means: under $TOOLKIT, or a bare name (published or ours)."""
    word = word.replace('"', "").replace("'", "")
    if word.startswith("$TOOLKIT/"):
        return [REPO / word.split("/", 1)[1]]
    name = Path(word).name
    return sorted({*PUBLISHED.rglob(name), *(REPO / "configs").glob(f"*/{name}")})


def staged(config: Path, tmp: Path, extra: dict[str, str] | None = None) -> tuple[str, dict[str, str], str]:
    """(benchmark, the environment the trainer gets, the launcher's words) after the config stage."""
    env = stage_env(tmp, PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", **(extra or {}))
    done = subprocess.run(
        ["bash", "-c", STAGE, "stage", str(REPO), str(config)], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, f"{config}: {done.stderr.decode()}"
    out = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return out["BENCHMARK"], {**out, **(extra or {})}, done.stderr.decode()


@pytest.mark.parametrize("block", GPU, ids=lambda b: b.id)
def test_a_gpu_command_parses_and_its_config_is_accepted(block, tmp_path):
    done = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True)
    assert done.returncode == 0, f"{DOC.name}:{block.line}: {done.stderr}"
    for word in SOURCED.findall(block.code):
        configs = configs_named(word)
        assert configs, f"{DOC.name}:{block.line}: no config {word} here"
        for config in configs:
            bench, env, _ = staged(config, tmp_path)
            cfg, problems = trainer_config(bench, env)
            assert cfg is not None and problems == [], f"{config}: {problems}"


def section_tables(text: str) -> dict[str, list[list[list[str]]]]:
    """Per "## " section: its tables, each a list of rows of cells (the header row first)."""
    out: dict[str, list[list[list[str]]]] = {}
    section, table = "", None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if table is None:
                table = []
                out.setdefault(section, []).append(table)
            if not all(set(c) <= set("-: ") for c in cells):
                table.append(cells)
        else:
            table = None
    return out


TABLES = section_tables(DOC.read_text())


def test_the_names_said_not_applicable_are_so_in_the_vocabulary():
    seen = 0
    for section, bench in SECTIONS.items():
        for table in TABLES.get(section, []):
            if not table[0][0].lower().startswith("not applicable here"):
                continue
            for row in table[1:]:
                for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row[0]):
                    entry = vendor_vars.row(name, bench)
                    assert entry is not None and entry.kind == vendor_vars.NOT_APPLICABLE, (section, name)
                    seen += 1
    assert seen >= 20


CANNOT = next(t for t in TABLES.get("What cannot run here", []) if len(t[0]) >= 3)
OTHERWISE = next(t for t in TABLES.get("What runs otherwise than published", []) if len(t[0]) >= 3)


@pytest.mark.parametrize("row", OTHERWISE[1:], ids=lambda r: r[0][:40])
def test_what_runs_otherwise_is_said_as_quoted(row, tmp_path):
    """Each row: a published config, and quoted, what its substitutions say on its own world size."""
    (config,) = re.findall(r"`([^`]+\.sh)`", row[1])
    quote = re.findall(r"`([^`]+)`", row[2])[0]
    bench, env, _ = staged(PUBLISHED / config, tmp_path, {})
    cfg, problems = trainer_config(bench, env)
    assert cfg is not None and problems == [], problems
    said = cfg.substitutions(int(env["DGXNNODES"]) * int(env["DGXNGPU"]))
    assert any(quote in s for s in said), (quote, said)


@pytest.mark.parametrize("row", CANNOT[1:], ids=lambda r: r[0][:40])
def test_what_cannot_run_is_said_as_quoted(row, tmp_path):
    """Each row: a published config (and settings added to it) and, quoted, what the config stage says."""
    (config,) = re.findall(r"`([^`]+\.sh)`", row[1])
    extra = dict(s.split("=", 1) for s in re.findall(r"`([A-Z][A-Z0-9_]*=[^`]*)`", row[1]))
    quote = re.findall(r"`([^`]+)`", row[2])[0].strip('"').rstrip(".")
    bench, env, launcher = staged(PUBLISHED / config, tmp_path, extra)
    cfg, problems = trainer_config(bench, env)
    said = problems + (vendor_vars.describe(cfg.vendor_names) if cfg is not None else []) + [launcher]
    assert any(quote in s for s in said), (quote, said)
