"""The layering of the three Python trees, read from the import statements of every file (benchmark packages
are those the benchmark table, `training/benchmarks.py`, names; everything else is shared code):
- training/: shared code (`common/`, `fp8/`, the Llama model family `llama/`, `scoring/`, ...) and the entry
  points (`training/*.py`) import no benchmark package; a benchmark package imports no other benchmark
  package; `common/` imports nothing above it; nothing imports input_preprocessing/ (the preflight runs the
  data verifiers as commands); a package's `__init__.py` hands names on and defines nothing;
- input_preprocessing/: the same between its shared code (`common/`, the top-level modules) and its
  benchmark folders (each benchmark's `prepare` script's folder); it imports training/'s shared code at
  most, never a training benchmark package;
- perf/ may import training/ and input_preprocessing/, and nothing in them imports perf/; within perf/, the
  commands (`perf/*.py`) import the library (`perf/lib/`) and no other command, and the library imports no
  command.

And no file of the three trees assigns to a module of theirs that is not its own (`module.name = ...`,
`setattr(module, ...)`, through any name the module was imported or aliased under): features meet the code
through declared interfaces, not patches (a test may, with pytest's monkeypatch).
"""

from __future__ import annotations

import ast
from pathlib import Path

from training.benchmarks import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
TREES = ("training", "input_preprocessing", "perf")
COMMON_MAY_IMPORT = ("training.common",)


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads from, its relative form resolved against `package`."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(parts + ([base] if base else []))


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module a file imports (relative imports resolved against `package`, the file's package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node, package)
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
    assert packages["training"] == {
        "training.bert",
        "training.llama31_8b",
        "training.llama2_70b_lora",
        "training.flux1",
    }
    assert packages["input_preprocessing"] == {
        "input_preprocessing.bert",
        "input_preprocessing.llama31_8b",
        "input_preprocessing.llama2_70b_lora",
        "input_preprocessing.flux1",
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
    write(
        tmp_path,
        {
            "training/common/util.py": (
                "from training.alpha import model\nfrom training.fp8.choices import X\n"
            ),
            "training/common/base.py": (
                "from training.fp8 import apply_fp8\nfrom training.common import util\n"
            ),
            "training/alpha/model.py": "from ..beta.data import rows\nfrom . import config\n",
            "training/beta/data.py": "import input_preprocessing.beta.verify\n",
            "training/doctor.py": "from training import beta\nimport perf.bench\n",
            "input_preprocessing/common/files.py": "from input_preprocessing.alpha import sample\n",
            "input_preprocessing/alpha/sample.py": "from ..beta import verify\nimport training.llama\n",
            "input_preprocessing/beta/verify.py": (
                "from training.beta.data import read\nimport training.common\n"
            ),
            "perf/bench.py": (
                "from training.alpha import model\nfrom input_preprocessing.beta import verify\n"
            ),
        },
    )
    packages = {
        "training": {"training.alpha", "training.beta"},
        "perf": set(),
        "input_preprocessing": {"input_preprocessing.alpha", "input_preprocessing.beta"},
    }
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
        "training/common/util.py: imports training.fp8.choices (common/ imports nothing above it)",
        "training/common/util.py: imports training.fp8.choices.X (common/ imports nothing above it)",
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


def perf_command_imports(root: Path) -> list[str]:
    """Each import between `perf/`'s commands (its top-level modules) or from its library into a command."""
    commands = {f"perf.{path.stem}" for path in (root / "perf").glob("*.py") if path.stem != "__init__"}
    out = []
    for path in sorted((root / "perf").rglob("*.py")):
        rel = path.relative_to(root)
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for name in sorted(imported_modules(path, package)):
            command = owner(name, commands)
            if command and command != module:
                side = "the library" if within(module, "perf.lib") else "a command"
                out.append(f"{rel}: imports {name} ({side} imports no command)")
    return out


def module_file(root: Path, dotted: str) -> Path | None:
    """The file of module `dotted` under `root`, if it is one of the trees'."""
    path = root.joinpath(*dotted.split("."))
    return next((f for f in (path.with_suffix(".py"), path / "__init__.py") if f.is_file()), None)


def resolve_module(root: Path, dotted: str) -> str | None:
    """The module of the trees that `dotted` names: a module's file, or a module a module imports under that
    name (`training.lora.fused.kernels` is `training.lora.kernels`); None for anything else."""
    if dotted.split(".")[0] not in TREES:
        return None
    if module_file(root, dotted):
        return dotted
    base, _, name = dotted.rpartition(".")
    path = module_file(root, base) if base else None
    if path is None:
        return None
    package = base if path.name == "__init__.py" else base.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            source = absolute(node, package)
            for alias in node.names:
                if (alias.asname or alias.name) == name and module_file(root, f"{source}.{alias.name}"):
                    return f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name and module_file(root, alias.name):
                    return alias.name
    return None


def module_assignments(root: Path, path: Path, module: str, package: str) -> list[str]:
    """Where the file at `path` (module `module`) assigns to, deletes from or `setattr`s on a module of the
    trees other than itself."""
    nodes = list(ast.walk(ast.parse(path.read_text(), str(path))))
    names: dict[str, str] = {}  # a name in the file -> the module it stands for

    def resolve(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return names.get(expr.id)
        if isinstance(expr, ast.Attribute) and (base := resolve(expr.value)):
            return resolve_module(root, f"{base}.{expr.attr}")
        return None

    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node, package)
            for alias in node.names:
                if found := resolve_module(root, f"{source}.{alias.name}"):
                    names[alias.asname or alias.name] = found
    for node in nodes:  # aliases: `kernels = fused.kernels`
        one_name = isinstance(node, ast.Assign) and len(node.targets) == 1
        if one_name and isinstance(node.targets[0], ast.Name) and (found := resolve(node.value)):
            names[node.targets[0].id] = found

    def flatten(target: ast.expr):
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                yield from flatten(element)
        else:
            yield target

    out, rel = [], path.relative_to(root)
    for node in nodes:
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = [t for target in node.targets for t in flatten(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and (found := resolve(target.value)) and found != module:
                out.append(f"{rel}:{node.lineno}: assigns {found}.{target.attr}")
        patch = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
        patch = patch and node.func.id in ("setattr", "delattr")
        if patch and (found := resolve(node.args[0])) and found != module:
            out.append(f"{rel}:{node.lineno}: {node.func.id} on {found}")
    return out


def assignments_from_outside(root: Path) -> list[str]:
    out = []
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
            out += module_assignments(root, path, module, package)
    return out


def test_perf_commands_are_thin_scripts_on_its_library():
    assert perf_command_imports(ROOT) == []
    assert (ROOT / "perf" / "lib" / "__init__.py").is_file()


def test_no_module_is_patched_from_outside():
    assert assignments_from_outside(ROOT) == []


def test_the_perf_and_patch_rules_are_seen(tmp_path):
    write(
        tmp_path,
        {
            "perf/bench_a.py": "from perf import bench_b\nfrom perf.lib import rows\n",
            "perf/bench_b.py": "import perf.lib.rows\ndef f():\n    from perf.bench_a import x\n",
            "perf/lib/__init__.py": "",
            "perf/lib/rows.py": "from perf.lib import text\nfrom perf import bench_a\n",
            "perf/lib/text.py": "",
            "training/__init__.py": "",
            "training/alpha/__init__.py": "",
            "training/alpha/model.py": "from training.alpha import kernels\nSIZE = 1\n",
            "training/alpha/kernels.py": "BM = 32\n",
            "training/beta/__init__.py": "",
            "training/beta/patch.py": (
                "import training.alpha.model as m\nfrom training.alpha import model\nfrom "
                "training import alpha\n"
                "model.SIZE = 2\nm.SIZE += 1\nalpha.model.build = None\nsetattr(model, 'SIZE', 3)\n"
                "k = model.kernels\nk.BM, other = 64, 1\nconfig = model.SIZE\nconfig.x = 1\n"
            ),
            "perf/bench_c.py": "from training.alpha import model\ndef f(monkeypatch):\n    del model.SIZE\n",
        },
    )
    assert perf_command_imports(tmp_path) == [
        "perf/bench_a.py: imports perf.bench_b (a command imports no command)",
        "perf/bench_b.py: imports perf.bench_a (a command imports no command)",
        "perf/bench_b.py: imports perf.bench_a.x (a command imports no command)",
        "perf/lib/rows.py: imports perf.bench_a (the library imports no command)",
    ]
    assert assignments_from_outside(tmp_path) == [
        "training/beta/patch.py:4: assigns training.alpha.model.SIZE",
        "training/beta/patch.py:5: assigns training.alpha.model.SIZE",
        "training/beta/patch.py:6: assigns training.alpha.model.build",
        "training/beta/patch.py:9: assigns training.alpha.kernels.BM",
        "training/beta/patch.py:7: setattr on training.alpha.model",
        "perf/bench_c.py:3: assigns training.alpha.model.SIZE",
    ]


def test_package_faces_define_nothing():
    """A package's `__init__.py` hands its names on: its logic lives in modules named for what it does."""
    for init in sorted((ROOT / "training").glob("*/__init__.py")):
        tree = ast.parse(init.read_text())
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert defined == [], (init, defined)
