"""Triton imported before seqlab switches its interpreter on: a student's kernel that runs
``from torch.utils.flop_counter import FlopCounterMode`` (it imports Triton) before ``import seqlab`` still runs
every ``mode="triton"`` on the CPU, and gets the same numbers as a process that imported seqlab first.

Each case runs in a fresh process (the order of imports is the point; this one has seqlab already)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO

pytest.importorskip("triton")

# Run by a fresh interpreter: import what argv[1] says first, then seqlab; every op's Triton mode on one small
# input against its float64 reference; prints the relative errors and how many library functions were replaced.
PROGRAM = r"""
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
import torch
from seqlab import kernels
from seqlab.kernels import interpreter
from seqlab.ops import linear_scan, relative_error
from seqlab.ops.decay import decay_attention
from seqlab.ops.gateloop import gateloop

torch.manual_seed(0)
q, k = torch.randn(2, 1, 2, 37, 8, dtype=torch.float64)
v = torch.randn(1, 2, 37, 6, dtype=torch.float64)
a = torch.rand(1, 2, 37, 8, dtype=torch.float64) * 0.5 + 0.5
x = torch.randn(2, 37, 5, dtype=torch.float64)
f32 = lambda *t: [u.float() for u in t]
errors = {
    "gateloop": relative_error(gateloop(*f32(q, k, v, a), mode="triton").double(),
                               gateloop(q, k, v, a, mode="recurrent")),
    "decay_attention": relative_error(decay_attention(*f32(q, k, v), mode="triton").double(),
                                      decay_attention(q, k, v, mode="recurrent")),
    "linear_scan": relative_error(linear_scan(*f32(a[0, 0, :, :5], x), mode="triton").double(),
                                  linear_scan(a[0, 0, :, :5], x, mode="sequential")),
}
from triton.runtime.jit import JITFunction
import triton.language as tl
left = [n for n, f in vars(tl).items() if isinstance(f, JITFunction)]
print(json.dumps({"status": kernels.status(), "errors": errors, "compiled_library_functions_left": left,
                  "replaced_again": interpreter.interpret_preloaded_library()}))
"""


def _run(first_imports):
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SEQLAB_NO_TRITON")}
    done = subprocess.run([sys.executable, "-c", PROGRAM, json.dumps(first_imports)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("first", [pytest.param([], marks=pytest.mark.slow), ["torch.utils.flop_counter"],
                                   pytest.param(["triton", "triton.language"], marks=pytest.mark.slow)],
                         ids=["seqlab-first", "flop-counter-first", "triton-first"])
def test_triton_modes_run_in_the_interpreter_whatever_was_imported_first(first):
    if "cuda" in os.environ.get("SEQLAB_TEST_DEVICE", ""):
        pytest.skip("the interpreter path is the CPU's")
    found = _run(first)
    assert "CPU interpreter" in found["status"], found["status"]
    assert found["compiled_library_functions_left"] == []
    for op, err in found["errors"].items():
        assert err < 1e-5, (op, err)
    assert found["replaced_again"] == 0          # a second call finds nothing left to replace
