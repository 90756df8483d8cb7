"""Code, configs and tests say what is and why, not what happened: no ordinal of past work ("the fifth
session"), no issue or pull-request number ("issue 38", "#38") anywhere in them, and no date in their comments
and docstrings. History lives in the commit messages and `perf/RESULTS_ARCHIVE.md`; a measured figure in
`perf/RESULTS.md`'s generated tables.

The shipped configs' comments (configs/*/*.sh) hold no measured figure (a percentage, a memory figure in GiB
or a GB difference, a rate, a ratio) and no project status ("not yet run"): `perf/RESULTS.md` holds them, and
a config points to its section by name (`perf/RESULTS.md, "The configs' settings"`), which must exist. A
config may name sizes that are settings ("8192 tokens", "GBS 8"), vendors' figures ("LR 6e-4 over 550 steps")
and a card's memory in GB as its vendor states it ("141 GB per GPU").

Read: Python, shell, SLURM and Docker files, TOML, requirements, and the JSON of configs/ and tests/ (their
notes). Not read: the Markdown (results, archive, READMEs), `tests/data/` and `perf/results/` (recorded
outputs), the bundled sample text. Dates are data, not history, in a string a test feeds to code (a log line,
a ruleset's publication date) and in the scorer's comments on MLPerf rounds and RCP table versions
(`training/scoring/`, `tests/scoring/`), and as a folder's name in a path (`perf/results/<date>/`): only
comments and docstrings elsewhere are read for them. Version numbers (`5.1.0`, `v4.0`) match no pattern.
"""

from __future__ import annotations

import ast
import bisect
import io
import os
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", ".whl", "__pycache__", "node_modules"}
SKIP_UNDER = ("tests/data/", "perf/results/", "input_preprocessing/bert/sample/")
DATES_ARE_DATA = ("training/scoring/", "tests/scoring/")

ORDINAL = (
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th)"
    r"|this|that|last|previous|earlier|later|an? (?:earlier|later|previous)) sessions?\b"
)
# "issue 38", "issues 20, 21", "issue #18", "PR 12", "pull request #3", and a bare "#38" (not "##38",
# WordPiece's continuation, nor "&#38;", nor a URL's fragment)
ISSUE = r"\bissues? #?\d+\b|\bPR #?\d+\b|\bpull request #?\d+\b|(?<![\w#&/])#\d+\b"
DATE = re.compile(r"(?<![\w/])(?:19|20)\d\d-[01]\d-[0-3]\d(?![\w/])")  # not a folder's name in a path
EVERYWHERE = {
    "an ordinal of past work": re.compile(ORDINAL, re.I),
    "an issue number": re.compile(ISSUE, re.I),
}
CONFIGS = "configs/"
# In a config's comments: "+3%", "126.8 GiB", "16 GB more", "2,681 tokens/s", "~10x slower", "1.06x ACL 40's",
# "runs no faster than 80", "not yet run on 8 GPUs", "has not run here", "an 8-GPU run should confirm it".
# Not "141 GB per GPU" (a card), "x 8 GPUs", "config_MI355X_01x08x64.sh", a pointer to "What has not run".
NUMBER = r"(?<![\w.,])[+~-]?\d[\d,]*(?:\.\d+)?"
MEASURED = {
    "a measured figure": re.compile(
        rf"{NUMBER} ?(?:%|GiB\b)|{NUMBER} GB (?:more|less|of\b)|\b(?:tokens|samples|images)/s\b|TFLOP"
        rf"|{NUMBER}x(?!\w)|\bno (?:faster|slower) than\b",
        re.I,
    ),
    "a project status": re.compile(
        r"\bnot yet\b|\bha(?:s|ve)(?: not)? run\b|\bnot run\b|\bshould confirm\b|\bthe path that has\b", re.I
    ),
}
POINTER = re.compile(r'perf/RESULTS\.md,\s+"([^"]+)"')  # a section of RESULTS.md, by its heading


def files(root: Path = ROOT) -> list[Path]:
    """The files read (this one aside: it holds the patterns and their examples)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            if rel.startswith(SKIP_UNDER) or path == Path(__file__).resolve():
                continue
            json_notes = path.suffix == ".json" and rel.startswith(("configs/", "tests/"))
            if (
                path.suffix in {".py", ".sh", ".sub", ".toml"}
                or name.startswith("Dockerfile")
                or json_notes
                or re.fullmatch(r"requirements.*\.txt", name)
                or rel == ".ci/run"
            ):
                found.append(path)
    return found


def prose(text: str) -> tuple[str, list[int], list[int]]:
    """The file's words joined by single spaces, `#` comment markers left out (so a phrase wrapped over two
    comment lines is one phrase), with each word's offset and line number."""
    words, offsets, lines, at = [], [], [], 0
    for number, line in enumerate(text.splitlines(), 1):
        for word in line.split():
            if not word.strip("#"):
                continue
            words.append(word)
            offsets.append(at)
            lines.append(number)
            at += len(word) + 1
    return " ".join(words), offsets, lines


def matches(text: str, pattern: re.Pattern) -> list[tuple[int, str]]:
    joined, offsets, lines = prose(text)
    found = []
    for m in pattern.finditer(joined):
        found.append((lines[bisect.bisect_right(offsets, m.start()) - 1], m.group(0)))
    return found


def comments(path: Path, text: str) -> list[tuple[int, str]]:
    """(first line, text) of each comment, and in Python of each docstring or other bare string statement."""
    found = []
    if path.suffix == ".py":
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                found.append((token.start[0], token.string))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str):
                found.append((node.lineno, node.value.value))
    elif path.suffix != ".json":
        for number, line in enumerate(text.splitlines(), 1):
            code, hashed, comment = line.partition("#")
            if hashed and (not code.strip() or code.endswith((" ", "\t"))):
                found.append((number, comment))
    return found


def problems(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root).as_posix()
    text = path.read_text(errors="replace")
    found = [
        f"{rel}:{line}: {what}: {said!r}"
        for what, pattern in EVERYWHERE.items()
        for line, said in matches(text, pattern)
    ]
    if not rel.startswith(DATES_ARE_DATA) and DATE.search(text):
        for first, comment in comments(path, text):
            found += [
                f"{rel}:{first + comment.count(chr(10), 0, m.start())}: a date: {m.group(0)!r}"
                for m in DATE.finditer(comment)
            ]
    if rel.startswith(CONFIGS) and path.suffix == ".sh":
        found += config_problems(path, text, root)
    return found


def config_problems(path: Path, text: str, root: Path) -> list[str]:
    """A measured figure or a project status in a config's comments (a phrase wrapped over lines is one),
    and a pointer to a section that `perf/RESULTS.md` lacks."""
    rel = path.relative_to(root).as_posix()
    lines = [""] * len(text.splitlines())
    for number, comment in comments(path, text):
        lines[number - 1] = comment
    said = "\n".join(lines)
    found = []
    results = root / "perf" / "RESULTS.md"
    headings = set(re.findall(r"^##+ (.+?)\s*$", results.read_text(), re.M)) if results.exists() else set()
    for line, pointer in matches(said, POINTER):
        if (section := POINTER.fullmatch(pointer).group(1)) not in headings:
            found.append(f"{rel}:{line}: a pointer to no section of perf/RESULTS.md: {section!r}")
    # a section's name is no status ("What has not run"): blanked, its line breaks kept
    said = POINTER.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), said)
    for what, pattern in MEASURED.items():
        found += [f"{rel}:{line}: {what}: {m!r}" for line, m in matches(said, pattern)]
    return found


def test_code_configs_and_tests_say_what_is():
    found = [problem for path in files() for problem in problems(path)]
    assert not found, "history in code (say what is and why; the story to a commit):\n" + "\n".join(found)


def test_the_patterns_fire_on_history_and_not_on_versions_or_data(tmp_path):
    history = tmp_path / "history.py"
    history.write_text(
        '"""Faster since the fifth\nsession (issue 38; see #38)."""\n\n'
        "# measured 2026-11-27 on an H100\nx = 1  # sixth session\n"
    )
    said = [p.split(": ", 1)[1] for p in problems(history, tmp_path)]
    assert said == [
        "an ordinal of past work: 'fifth session'",
        "an ordinal of past work: 'sixth session'",
        "an issue number: 'issue 38'",
        "an issue number: '#38'",
        "a date: '2026-11-27'",
    ]
    fine = tmp_path / "fine.py"
    fine.write_text(
        '"""MLPerf 5.1.0 (round v4.0), ##38 WordPiece, &#38;, a session of its own."""\n'
        'LOG = "RESULT,bert,,26,2026-11-27 02:53:40 AM"\nstart_new_session = True\n'
        "# measured: perf/results/2026-11-27/bench_lora_20blocks.json\n"
    )
    shell = tmp_path / "x.sh"
    shell.write_text('echo "${#names[@]}"  # the count\nurl="https://example.com/a#12"\n')
    assert problems(fine, tmp_path) == [] and problems(shell, tmp_path) == []


OLD_CONFIG = """\
# Not yet run on 8 GPUs by this toolkit. On 4 x H200 native FP8 at ACL=24 peaks at 126.8 GiB of 139.8
# (config_H200_1x4x2.sh); a kept block adds 1.41 GiB. An 8-GPU run should confirm it.
export ACL=14  # 141 GB per GPU (the runs above: fragmentation at 141 GB of 141)
# Blocks stay gathered from forward to backward: +3% on 4 x H200 for 16 GB more per GPU (perf/RESULTS.md).
# one thread: two spinning OpenMP threads per op are ~10x slower than one; ACL 76 runs no faster than 80
# the trainer 2,681-2,697 tokens/s at 824 TFLOP/s, the bench 1.06x ACL 40's speed (not yet run on one)
# NVIDIA trained fp16 with Transformer Engine FP8, which has not run here: bf16, the path that has.
"""
NEW_CONFIG = """\
# Llama 2 70B LoRA on 1 node x 8 H200 (config_MI355X_01x08x64.sh, 8xMI325X_EPYC_9575F_pytorch): GBS 8
# (MINIBS 1 x 8 GPUs), LR 6e-4 over 550 steps, 8192 tokens; the sharded state (16 bytes x 8.0e9 = 128 GB).
export ACL=14  # 141 GB per GPU: derived (perf/RESULTS.md, "The configs' settings"); MLPerf v5.1 values
# Transformer Engine: perf/RESULTS.md, "What
# has not run".
"""


def test_the_config_patterns_fire_on_figures_and_status_and_not_on_settings(tmp_path):
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "RESULTS.md").write_text(
        "# Results\n\n## The configs' settings\n\n## What has not run\n"
    )
    (tmp_path / "configs" / "x").mkdir(parents=True)
    old = tmp_path / "configs" / "x" / "config_old.sh"
    old.write_text(OLD_CONFIG)
    said = [p.split(": ", 1)[1] for p in problems(old, tmp_path)]
    assert said == [
        "a measured figure: '126.8 GiB'",
        "a measured figure: '1.41 GiB'",
        "a measured figure: '141 GB of'",
        "a measured figure: '+3%'",
        "a measured figure: '16 GB more'",
        "a measured figure: '~10x'",
        "a measured figure: 'no faster than'",
        "a measured figure: 'tokens/s'",
        "a measured figure: 'TFLOP'",
        "a measured figure: '1.06x'",
        "a project status: 'Not yet'",
        "a project status: 'should confirm'",
        "a project status: 'not yet'",
        "a project status: 'has not run'",
        "a project status: 'the path that has'",
    ]
    new = tmp_path / "configs" / "x" / "config_new.sh"
    new.write_text(NEW_CONFIG)
    assert problems(new, tmp_path) == []
    new.write_text(NEW_CONFIG.replace("The configs' settings", "The settings"))
    assert [p.split(": ", 1)[1] for p in problems(new, tmp_path)] == [
        "a pointer to no section of perf/RESULTS.md: 'The settings'"
    ]


def test_the_formatter_owns_the_layout():
    """No hand-packed line kept from the formatter: `ruff format` lays out every Python file."""
    marker = "# fmt: " + "skip"  # (split, or this file would hold it)
    held = [str(p.relative_to(ROOT)) for p in files() if p.suffix == ".py" and marker in p.read_text()]
    assert not held, f"{marker} in {held}: let ruff format lay the lines out"
