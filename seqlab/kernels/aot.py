"""Ahead-of-time compilation of a kernel for a real GPU target, without a GPU.

The CPU interpreter accepts code that the compiler rejects (non-constexpr shapes, unsupported
dtypes, ...). ``compile_for`` compiles a kernel to PTX/cubin for ``sm_80`` or ``sm_90`` in a fresh
Python process with ``TRITON_INTERPRET=0`` (under the interpreter ``@triton.jit`` does not give a
compilable function), so tests catch such code in CI.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

_SCRIPT = r"""
import importlib, json, sys
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
spec = json.loads(sys.argv[1])
module = importlib.import_module(spec["module"])
fn = getattr(module, spec["kernel"])
src = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constexprs"])
compiled = triton.compile(src, target=GPUTarget("cuda", spec["capability"], 32))
print(json.dumps({"asm": sorted(compiled.asm), "ptx_chars": len(compiled.asm["ptx"])}))
"""


def compile_for(module: str, kernel: str, signature: dict, constexprs: dict, capability: int = 80) -> dict:
    """Compile ``module.kernel`` for CUDA compute capability ``capability`` (80 = A100, 90 = H100).

    ``signature`` maps every argument to its Triton type (``"*fp32"``, ``"*bf16"``, ``"i32"``, ``"fp32"``,
    or ``"constexpr"``); ``constexprs`` gives the constexpr values. Returns
    ``{"asm": [stages], "ptx_chars": n}``; raises ``RuntimeError`` with the compiler's message on failure.
    """
    # "0", not unset: seqlab.kernels switches the interpreter on when the variable is missing.
    env = dict(os.environ, TRITON_INTERPRET="0")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    spec = json.dumps({"module": module, "kernel": kernel, "signature": signature,
                       "constexprs": constexprs, "capability": capability})
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, spec], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {module}.{kernel} for sm_{capability} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
