"""``workbench.py test --quick``: the fast tier runs ``-m "not slow"`` over tests/ (no lesson under nbval, one pass);
``test`` with no arguments, what CI runs, deselects nothing. tests/conftest.py marks the slow tests; each of its
rules still names a test that exists."""
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import REPO, TESTS


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def launched(monkeypatch):
    """workbench.py with the environment taken as made and pytest not started: the commands it would run."""
    wb = _load("workbench_quick_under_test", REPO / "workbench.py")
    calls = []
    monkeypatch.setattr(wb, "ensure_environment", lambda: Path("python"))
    monkeypatch.setattr(wb, "cpu_capability", lambda py, env: "AVX2")
    monkeypatch.setattr(wb.subprocess, "call", lambda cmd, **kw: calls.append(cmd[cmd.index("pytest") + 1:]) or 0)
    return wb, calls


def _marker_expression(args):
    return [args[i + 1] for i, a in enumerate(args) if a == "-m"]


def test_quick_runs_the_tests_not_marked_slow_once_and_no_lesson(launched):
    wb, calls = launched
    assert wb.test(["--quick"]) == 0
    [args] = calls
    assert _marker_expression(args) == ["not slow"]
    assert args[-1] == "tests" and "notebooks" not in args and "--nbval" not in args
    assert args[args.index("-n") + 1] == "2"


def test_quick_takes_pytest_arguments_and_a_path_replaces_tests(launched):
    wb, calls = launched
    wb.test(["--quick", "tests/ops", "-x", "-k", "scan"])
    wb.test(["-x", "--quick"])
    named, unnamed = calls
    assert _marker_expression(named) == ["not slow"] and named[-4:] == ["tests/ops", "-x", "-k", "scan"]
    assert "tests" not in named
    assert _marker_expression(unnamed) == ["not slow"] and unnamed[-2:] == ["-x", "tests"]


def test_the_full_run_deselects_nothing(launched):
    """What CI runs (.ci/run: ``python3 workbench.py test``): every test, slow ones included, and every lesson."""
    wb, calls = launched
    assert wb.test([]) == 0
    first, second = calls
    assert not _marker_expression(first) and not _marker_expression(second)
    assert not any(a.startswith("-m") or "slow" in a for a in first + second)
    assert first[-2:] == ["tests", "notebooks"] and "--nbval" in first
    assert second[-1] == "notebooks" and "--nbval" in second
    assert (REPO / ".ci" / "run").read_text().strip().splitlines()[-1] == "python3 workbench.py test"


def _item(nodeid, params=None, fixtures=()):
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures),
                           callspec=SimpleNamespace(params=params) if params is not None else None)


def test_long_op_parametrisations_are_slow_and_short_ones_stay_quick():
    rules = _load("conftest_rules_under_test", TESTS / "conftest.py")
    forward = "tests/ops/test_scan.py::test_forward_matches_float64_loop[{}]"
    assert rules._is_slow(_item(forward.format("x-4099"), {"L": 4099, "kind": "real"}))
    for L in (1, 2, 7, 64, 1000):
        assert not rules._is_slow(_item(forward.format(L), {"L": L, "kind": "real", "variant": (True, True, False)}))
    assert not rules._is_slow(_item("tests/models/test_x.py::test_y[5000]", {"n": 5000}))   # the length rule: ops only
    assert rules._is_slow(_item("tests/train/test_faults.py::test_z", fixtures=["tmp_path", "held"]))
    assert rules._is_slow(_item("tests/ops/test_scan_triton.py::TestAOTForward::test_forward_kernels_compile[a-80]"))
    assert not rules._is_slow(_item("tests/ops/test_scan_triton.py::test_triton_bfloat16_inputs_keep_a_float32_state"))


def test_every_rule_of_the_slow_tier_names_a_collected_test():
    """A renamed test or module would silently come back into the quick tier: each name still marks one."""
    rules = _load("conftest_names_under_test", TESTS / "conftest.py")
    modules = sorted(rules.SLOW_MODULES | {name.split("::", 1)[0] for name in rules.SLOW_TESTS})
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:cacheprovider",
                          "-p", "no:xdist", *modules], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    slow = [line for line in out.stdout.splitlines() if "::" in line]
    for name in sorted(rules.SLOW_TESTS):
        assert any(line.split("[", 1)[0] == name or line.startswith(name + "::") for line in slow), name
    for module in rules.SLOW_MODULES:
        assert any(line.startswith(module + "::") for line in slow), module
