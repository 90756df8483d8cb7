"""The layering of `training/`, read from the import statements of every file:
- shared code (`common/`, `fp8/`, the Llama model family `llama/`, `scoring/`) and the entry points
  (`training/*.py`) import no benchmark package (the packages the benchmark table names);
- a benchmark package imports no other benchmark package;
- nothing under `training/` imports `input_preprocessing/` (the preflight runs the data verifiers as
  commands).
"""

from __future__ import annotations

import ast
from pathlib import Path

from training.benchmarks import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]


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


def owner(module: str, packages: set[str]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def violations(training: Path, packages: set[str]) -> list[str]:
    """Each import that breaks the layering, as `file: imports module (rule)`."""
    out = []
    for path in sorted(training.rglob("*.py")):
        rel = path.relative_to(training.parent)
        module = ".".join(rel.with_suffix("").parts)
        package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
        mine = owner(module, packages)
        for name in sorted(imported_modules(path, package)):
            target = owner(name, packages)
            if name.split(".")[0] == "input_preprocessing":
                out.append(f"{rel}: imports {name} (training/ never imports input_preprocessing/)")
            elif target and mine is None:
                out.append(f"{rel}: imports {name} (shared code and entry points import no benchmark)")
            elif target and mine and target != mine:
                out.append(f"{rel}: imports {name} (benchmark packages never import each other)")
    return out


def test_the_tree_keeps_its_layers():
    packages = {b.package for b in BENCHMARKS.values()}
    assert packages == {"training.bert", "training.llama31_8b", "training.llama2_70b_lora"}
    assert violations(ROOT / "training", packages) == []


def test_each_rule_is_seen(tmp_path):
    training = tmp_path / "training"
    for folder in ("common", "alpha", "beta"):
        (training / folder).mkdir(parents=True)
        (training / folder / "__init__.py").write_text("")
    (training / "common" / "util.py").write_text("from training.alpha import model\n")
    (training / "alpha" / "model.py").write_text("from ..beta.data import rows\nfrom . import config\n")
    (training / "beta" / "data.py").write_text("import input_preprocessing.beta.verify\n")
    (training / "doctor.py").write_text("from training import beta\n")
    apart = "benchmark packages never import each other"
    assert violations(training, {"training.alpha", "training.beta"}) == [
        f"training/alpha/model.py: imports training.beta.data ({apart})",
        f"training/alpha/model.py: imports training.beta.data.rows ({apart})",
        "training/beta/data.py: imports input_preprocessing.beta.verify (training/ never imports "
        "input_preprocessing/)",
        "training/common/util.py: imports training.alpha (shared code and entry points import no benchmark)",
        "training/common/util.py: imports training.alpha.model (shared code and entry points import no "
        "benchmark)",
        "training/doctor.py: imports training.beta (shared code and entry points import no benchmark)",
    ]
