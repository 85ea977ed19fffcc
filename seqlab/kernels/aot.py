"""Ahead-of-time compilation of a kernel for a real GPU target, without a GPU, and its register report.

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


_USAGE_SCRIPT = r"""
import contextlib, importlib, io, json, re, sys
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
report = []
for job in json.loads(sys.stdin.read()):
    fn = getattr(importlib.import_module(job["module"]), job["kernel"])
    sig = {}
    for p in fn.params:
        if p.is_constexpr:
            sig[p.name] = "constexpr"
        elif p.name.startswith("stride") or p.name.isupper():     # sizes and strides
            sig[p.name] = "i32"
        else:
            sig[p.name] = "*" + job["dtype"]
    log = io.StringIO()
    with contextlib.redirect_stdout(log):       # Triton prints ptxas's -v report here (TRITON_DUMP_PTXAS_LOG)
        constexprs = {k: v for k, v in job["constexprs"].items() if k in sig}   # the ones this kernel takes
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                                  target=GPUTarget("cuda", job["capability"], 32),
                                  options={"num_warps": job.get("num_warps", 4)})
    text = log.getvalue()
    dots = re.findall(r"tt\.dot [^\n]*", compiled.asm["ttir"])
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    report.append(dict(job, registers=int(regs.group(1)) if regs else None,
                       spill_stores=int(spill.group(1)) if spill else None,
                       spill_loads=int(spill.group(2)) if spill else None, ptxas=text[-2000:],
                       dots=[re.sub(r" loc\(.*", "", d) for d in dots]))
print(json.dumps(report))
"""


def ptxas_usage(jobs: list[dict]) -> list[dict]:
    """Compile every job in one fresh process as Triton compiles for a real GPU, and return ``ptxas -v``'s
    registers and spill bytes for each: ``ptxas`` runs with Triton's own options (the report comes from
    Triton's ``make_cubin`` with ``TRITON_DUMP_PTXAS_LOG=1``; no Triton cache, so it always runs).

    A job is ``{"module", "kernel", "constexprs", "capability", "dtype"}`` (``dtype``: the pointers' Triton
    type, e.g. ``"fp32"``) and optionally ``"num_warps"`` (the launch's, default 4); arguments in capitals or named ``stride*`` are ``i32``, the rest pointers. Each
    result is the job plus ``registers``, ``spill_stores``, ``spill_loads`` (bytes), the ``ptxas`` text and
    ``dots``, the ``tt.dot`` operations of the kernel's Triton IR (the ones written and the ones the compiler
    made of other code).
    """
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", _USAGE_SCRIPT], input=json.dumps(jobs), capture_output=True,
                          text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling for ptxas -v failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
