"""Test set-up shared by every test file.

Triton's interpreter must be switched on before any ``@triton.jit`` runs, so it is set here,
before seqlab is imported (``seqlab.kernels`` would set it too on a machine without CUDA).
"""
import os

os.environ.setdefault("SEQLAB_PROFILE", "quick")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover
    pass

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same seed: failures reproduce."""
    from seqlab.config import seed_everything

    seed_everything(0)
    yield


# ----------------------------------------------------------------------------------------- the slow tier
# ``python3 workbench.py test --quick`` runs ``-m "not slow"``: the tests that catch most breakage in minutes
# (every op and mode against its float64 reference at small sizes, layers, models, tasks, decoding, the
# command line, the exercises' checkers). What is marked ``slow`` here runs in the full run only (``test``
# with no arguments, what CI runs). Tests that files mark themselves (``@pytest.mark.slow``) need no line here.
# Whole modules: Triton's ahead-of-time compiles for sm_80/sm_90 with ptxas (minutes each), JupyterLab in Chromium.
SLOW_MODULES = {
    "tests/ops/test_triton_spills.py",
    "tests/lessons/test_browser.py",
}
# Classes and tests by name, "module::name" (parametrisations included).
SLOW_TESTS = {
    "tests/ops/test_scan_triton.py::TestAOTForward",      # AOT compiles, as the spill tests
    "tests/ops/test_scan_triton.py::TestAOTBackward",
    "tests/train/test_faults.py::test_four_arena_sittings_on_one_file_keep_every_run_and_every_key",  # 4 processes
    "tests/train/test_distributed.py::test_torchrun_two_processes_train_the_same_run_as_one_and_resume",
    "tests/train/test_distributed.py::test_an_experiment_on_two_nodes_through_torchrun_rendezvous",
    "tests/train/test_results.py::test_four_sittings_side_by_side_keep_every_run_and_every_key",  # 4 processes
    # training runs: every claim end to end, a recorded run reproduced, a full profile's projection
    "tests/experiments/test_claims.py::test_every_claim_runs_end_to_end_at_tiny_sizes",
    "tests/experiments/test_arena.py::test_the_recorded_medium_gateloop_mqar_run_reproduces",
    "tests/experiments/test_experiment_configs.py::test_the_full_profile_benchmark_projects_a_whole_run",
    "tests/experiments/test_claims.py::test_cli_reproduce_prints_a_summary_and_writes_the_record",
}
# Fixtures that start real processes (a training run stopped by a signal, killed, resumed under torchrun) or
# build the book (tests/lessons/test_book.py's ``site``: Sphinx over every lesson) or run every claim end to end
# (tests/experiments/test_claims.py's ``tiny_results``).
SLOW_FIXTURES = {"held", "uninterrupted", "site", "tiny_results"}
# In tests/ops, parametrisations at a length of 4096 or more: the same op and mode stay tested at small sizes.
LONG = 4096


def _is_slow(item) -> bool:
    module = item.nodeid.split("::", 1)[0]
    if module in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    parts = item.nodeid.split("[", 1)[0].split("::")
    if any("::".join(parts[: i + 1]) in SLOW_TESTS for i in range(1, len(parts))):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return module.startswith("tests/ops/") and any(
        isinstance(v, int) and not isinstance(v, bool) and v >= LONG for v in params.values())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
