"""The package's shape: imports flow one way (README, Architecture), one folder per op, no LLVM IR."""
import ast
import pathlib
import subprocess
import sys

import pytest

import seqlab

PACKAGE = pathlib.Path(seqlab.__file__).parent


def _seqlab_imports(path: pathlib.Path) -> set[str]:
    """Every ``seqlab.*`` module a file imports (at any depth: inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("seqlab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqlab"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def _within(module: str, packages) -> bool:
    """``module`` is one of ``packages`` or inside one (``seqlab.trainer`` would not be inside ``seqlab.train``)."""
    return any(module == p or module.startswith(p + ".") for p in packages)



@pytest.mark.parametrize("layer,forbidden", [
    ("tasks", ("seqlab.train", "seqlab.models", "seqlab.layers", "seqlab.experiments", "seqlab.viz")),
    ("ops", ("seqlab.layers", "seqlab.models", "seqlab.train", "seqlab.tasks", "seqlab.viz", "seqlab.readout")),
    ("layers", ("seqlab.models", "seqlab.train", "seqlab.viz", "seqlab.readout")),
    ("experiments", ("seqlab.claims",)),         # claims run experiments; results (seqlab.results) serve both
])
def test_imports_flow_one_way(layer, forbidden):
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        bad = sorted(m for m in _seqlab_imports(path) if _within(m, forbidden))
        assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {bad}"


def test_no_module_shadows_the_standard_library():
    """A script run from a folder of the package imports that folder's files first: a ``seqlab/viz/inspect.py``
    would replace the standard ``inspect`` for it. No module of the package takes a standard library name."""
    clashes = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                     if p.stem in sys.stdlib_module_names)
    assert clashes == [], clashes


@pytest.mark.parametrize("op,forms", [
    ("scan", ("reference", "doubling", "associative", "blocked", "numba", "triton")),
    ("gateloop", ("recurrent", "associative", "attention", "chunked", "numba", "triton")),
    ("decay", ("reference", "additive", "multiplicative", "on_gateloop", "numba", "triton")),
    ("relation", ("reference", "quadratic", "linear", "streaming", "triton")),
    ("delta", ("reference", "recurrent", "chunked", "fla")),
])
def test_one_folder_per_op_holds_every_form(op, forms):
    """A reader opens ``seqlab/ops/<op>/`` and finds the equation (``__init__``), its float64 form and every
    fast form side by side; ``kernels/`` keeps only what the ops share."""
    folder = PACKAGE / "ops" / op
    assert {f"{name}.py" for name in ("__init__", *forms)} <= {p.name for p in folder.glob("*.py")}
    assert {p.name for p in (PACKAGE / "kernels").glob("*.py")} == {"__init__.py", "aot.py", "interpreter.py", "numba.py"}


def test_no_llvm_ir_in_the_package():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert "llvmlite" not in text and "numba.extending" not in text, f"{path.relative_to(PACKAGE.parent)}"


def _module_name(path: pathlib.Path) -> str:
    name = path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def _import_graph() -> dict[str, set[str]]:
    """``module -> the seqlab modules it imports`` (inside functions too). ``from pkg import mod`` is an edge to
    ``mod``, ``from pkg import name`` one to ``pkg``; an edge to a package that holds the importer is left out (a
    parent package is initialised before its modules)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                          for a in node.names}
        graph[name] = {m for m in found if m in paths and m != name and not name.startswith(m + ".")}
    return graph


def test_the_imports_between_modules_hold_no_cycle():
    graph = _import_graph()
    state: dict[str, int] = {}                      # 1: on the current path, 2: finished

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise AssertionError("an import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("module,forbidden", [
    ("seqlab.train", ("seqlab.experiments", "seqlab.claims", "seqlab.viz", "seqlab.exercises")),
    ("seqlab.train.loop", ("seqlab.experiments", "seqlab.claims", "seqlab.viz", "seqlab.exercises")),
    ("seqlab.train.checkpoint", ("seqlab.train.loop", "seqlab.experiments", "seqlab.claims")),
    ("seqlab.train.history", ("seqlab.train.loop", "seqlab.experiments", "seqlab.claims")),
    ("seqlab.train.schedule", ("seqlab.train.loop", "seqlab.experiments", "seqlab.claims")),
    ("seqlab.results", ("seqlab.train", "seqlab.experiments", "seqlab.claims")),
])
def test_the_upper_floors_import_downward(module, forbidden):
    bad = sorted(m for m in _import_graph()[module] if _within(m, forbidden))
    assert not bad, f"{module} imports {bad}"


def test_the_exercises_sit_on_top_and_import_no_claims():
    """Lessons import the exercises; nothing in the package does, and the checkers never run the claims."""
    graph = _import_graph()
    readers = sorted(m for m, imports in graph.items()
                     if not _within(m, ("seqlab.exercises",)) and any(_within(i, ("seqlab.exercises",)) for i in imports))
    assert readers == [], readers
    bad = sorted({i for m, imports in graph.items() if _within(m, ("seqlab.exercises",))
                  for i in imports if _within(i, ("seqlab.claims", "seqlab.__main__"))})
    assert bad == [], bad


def test_nothing_below_the_claims_imports_them():
    """The claims run experiments and read results; only the command line reads them."""
    readers = sorted(m for m, imports in _import_graph().items() if "seqlab.claims" in imports)
    assert readers == ["seqlab.__main__"], readers


def test_the_tests_are_grouped_as_the_package_is():
    """One folder of tests per floor of the package; a test file keeps its name wherever it lives."""
    tests = pathlib.Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders == {"ops", "layers", "models", "tasks", "train", "experiments", "viz", "lessons", "cli"}
    assert {p.name for p in tests.glob("test_*.py")} == {"test_layout.py", "test_config.py", "test_memory.py"}
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def _module_of(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_private_name_is_read_from_outside_its_package():
    """A name with a leading underscore (a module or a function) is imported only inside the package that holds
    it: ``seqlab.ops.scan._common`` serves ``seqlab/ops/scan/``, never the command line or a lesson's checker."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _module_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqlab")):
                continue
            for name in [node.module + "." + a.name for a in node.names]:
                parts = name.split(".")
                private = [i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")]
                if private:     # its owner: the package of the private module, or of the module with the private name
                    i = private[0]
                    holder = PACKAGE.parent.joinpath(*parts[:i])
                    owner = ".".join(parts[:i] if holder.is_dir() or i < len(parts) - 1 else parts[:i - 1])
                    if not (here == owner or here.startswith(owner + ".")):
                        bad.append(f"{here} imports {name}")
    assert not bad, bad


def test_the_training_floor_is_one_package():
    """The loop, its configuration, checkpoints, histories, signals, torchrun and the schedule live in
    ``seqlab/train/``; none of them is left loose at the package's top."""
    assert {p.name for p in (PACKAGE / "train").glob("*.py")} == {
        "__init__.py", "loop.py", "config.py", "checkpoint.py", "history.py", "interrupt.py", "distributed.py",
        "schedule.py"}
    loose = {p.stem for p in PACKAGE.glob("*.py")}
    assert not loose & {"train", "train_config", "checkpoint", "history", "interrupt", "distributed", "schedule"}


def test_build_tooling_stays_out_of_the_runtime_package():
    """The book is built by ``tools/book.py`` beside ``workbench.py``; installing seqlab installs no Sphinx tool."""
    assert not (PACKAGE / "book.py").exists()
    assert (PACKAGE.parent / "tools" / "book.py").exists()
    assert not any("sphinx" in _seqlab_imports(p) | {n for n in _plain_imports(p)} for p in PACKAGE.rglob("*.py"))


def _plain_imports(path: pathlib.Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_experiment_module_is_a_whole_floor():
    """Each module of ``seqlab/experiments/`` does one job: none is over 400 lines."""
    long = {p.name: n for p in (PACKAGE / "experiments").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}, long
