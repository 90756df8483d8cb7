"""The layering of the three Python trees, read from the import statements of every file (benchmark packages
are those the benchmark table, `training/benchmarks.py`, names; everything else is shared code):
- training/: shared code (`common/`, `fp8/`, the Llama model family `llama/`, `scoring/`, ...) and the entry
  points (`training/*.py`) import no benchmark package; a benchmark package imports no other benchmark
  package; `common/` imports nothing above it (of the rest of training/, only `fp8/choices.py`, which
  imports nothing); nothing imports input_preprocessing/ (the preflight runs the data verifiers as commands);
- input_preprocessing/: the same between its shared code (`common/`, the top-level modules) and its
  benchmark folders (each benchmark's `prepare` script's folder); it imports training/'s shared code at
  most, never a training benchmark package;
- perf/ may import training/ and input_preprocessing/, and nothing in them imports perf/.
"""

from __future__ import annotations

import ast
from pathlib import Path

from training.benchmarks import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
TREES = ("training", "input_preprocessing", "perf")
COMMON_MAY_IMPORT = ("training.common", "training.fp8.choices")


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module a file imports (relative imports resolved against `package`, the file's package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def owner(module: str, packages: set[str]) -> str | None:
    return next((p for p in packages if within(module, p)), None)


def broken_rule(module: str, name: str, benchmarks: dict[str, set[str]]) -> str | None:
    """Why `module` may not import `name`, or None. `benchmarks`: each tree's benchmark packages."""
    tree, target = module.split(".")[0], name.split(".")[0]
    if target not in TREES:
        return None  # the standard library, a third party
    if target == "perf" and tree != "perf":
        return "nothing imports perf/"
    if tree == "perf":
        return None
    if tree == "training" and target == "input_preprocessing":
        return "training/ never imports input_preprocessing/"
    if tree == "input_preprocessing" and owner(name, benchmarks["training"]):
        return "input_preprocessing/ imports no training benchmark"
    below_common = any(within(name, allowed) for allowed in COMMON_MAY_IMPORT)
    if within(module, "training.common") and target == "training" and not below_common:
        return "common/ imports nothing above it"
    if tree != target:
        return None
    mine, theirs = owner(module, benchmarks[tree]), owner(name, benchmarks[tree])
    if theirs and mine is None:
        return "shared code and entry points import no benchmark"
    if theirs and mine != theirs:
        return "benchmark packages never import each other"
    return None


def violations(root: Path, benchmarks: dict[str, set[str]]) -> list[str]:
    """Each import under `root`'s trees that breaks the layering, as `file: imports module (rule)`."""
    out = []
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            rel = path.relative_to(root)
            module = ".".join(rel.with_suffix("").parts)
            package = (
                module.removesuffix(".__init__") if path.name == "__init__.py" else module.rsplit(".", 1)[0]
            )
            for name in sorted(imported_modules(path, package)):
                rule = broken_rule(module.removesuffix(".__init__"), name, benchmarks)
                if rule:
                    out.append(f"{rel}: imports {name} ({rule})")
    return out


def benchmark_packages() -> dict[str, set[str]]:
    """The benchmark packages of each tree, from the benchmark table: the trainer's package, and the folder of
    the data preparation script."""
    prepare = {".".join(Path(b.prepare).parent.parts) for b in BENCHMARKS.values()}
    return {
        "training": {b.package for b in BENCHMARKS.values()},
        "input_preprocessing": prepare,
        "perf": set(),
    }


def test_the_trees_keep_their_layers():
    packages = benchmark_packages()
    assert packages["training"] == {"training.bert", "training.llama31_8b", "training.llama2_70b_lora"}
    assert packages["input_preprocessing"] == {
        "input_preprocessing.bert",
        "input_preprocessing.llama31_8b",
        "input_preprocessing.llama2_70b_lora",
    }
    assert violations(ROOT, packages) == []


def sys_path_edits(folder: Path) -> list[str]:
    """The files of `folder` that change `sys.path` (to import a sibling or the repository as top level)."""
    edits = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            target = (
                node.func.value
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                else None
            )
            if isinstance(target, ast.Attribute) and ast.unparse(target) == "sys.path":
                edits.append(f"{path.relative_to(folder.parent)}:{node.lineno}")
    return edits


def test_perf_imports_its_modules_as_a_package():
    assert sys_path_edits(ROOT / "perf") == []


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_each_rule_is_seen(tmp_path):
    write(tmp_path, {
        "training/common/util.py": "from training.alpha import model\nfrom training.fp8.choices import X\n",
        "training/common/base.py": "from training.fp8 import apply_fp8\nfrom training.common import util\n",
        "training/alpha/model.py": "from ..beta.data import rows\nfrom . import config\n",
        "training/beta/data.py": "import input_preprocessing.beta.verify\n",
        "training/doctor.py": "from training import beta\nimport perf.bench\n",
        "input_preprocessing/common/files.py": "from input_preprocessing.alpha import sample\n",
        "input_preprocessing/alpha/sample.py": "from ..beta import verify\nimport training.llama\n",
        "input_preprocessing/beta/verify.py": "from training.beta.data import read\nimport training.common\n",
        "perf/bench.py": "from training.alpha import model\nfrom input_preprocessing.beta import verify\n",
    })  # fmt: skip
    packages = {"training": {"training.alpha", "training.beta"}, "perf": set(),
                "input_preprocessing": {"input_preprocessing.alpha", "input_preprocessing.beta"}}  # fmt: skip
    apart = "benchmark packages never import each other"
    shared = "shared code and entry points import no benchmark"
    other = "input_preprocessing/ imports no training benchmark"
    assert violations(tmp_path, packages) == [
        f"training/alpha/model.py: imports training.beta.data ({apart})",
        f"training/alpha/model.py: imports training.beta.data.rows ({apart})",
        "training/beta/data.py: imports input_preprocessing.beta.verify (training/ never imports "
        "input_preprocessing/)",
        "training/common/base.py: imports training.fp8 (common/ imports nothing above it)",
        "training/common/base.py: imports training.fp8.apply_fp8 (common/ imports nothing above it)",
        "training/common/util.py: imports training.alpha (common/ imports nothing above it)",
        "training/common/util.py: imports training.alpha.model (common/ imports nothing above it)",
        "training/doctor.py: imports perf.bench (nothing imports perf/)",
        f"training/doctor.py: imports training.beta ({shared})",
        f"input_preprocessing/alpha/sample.py: imports input_preprocessing.beta ({apart})",
        f"input_preprocessing/alpha/sample.py: imports input_preprocessing.beta.verify ({apart})",
        f"input_preprocessing/beta/verify.py: imports training.beta.data ({other})",
        f"input_preprocessing/beta/verify.py: imports training.beta.data.read ({other})",
        f"input_preprocessing/common/files.py: imports input_preprocessing.alpha ({shared})",
        f"input_preprocessing/common/files.py: imports input_preprocessing.alpha.sample ({shared})",
    ]
    write(tmp_path, {"perf/parts.py": "import sys\nsys.path.insert(0, '..')\nfrom bench import x\n"})
    assert sys_path_edits(tmp_path / "perf") == ["perf/parts.py:2"]
