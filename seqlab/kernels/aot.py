"""Ahead-of-time compilation of a kernel for a real GPU target, without a GPU, and its register report.

The CPU interpreter accepts code that the compiler rejects (non-constexpr shapes, unsupported
dtypes, ...). ``compile_for`` compiles a kernel to PTX/cubin for ``sm_80`` or ``sm_90`` in a fresh
Python process with ``TRITON_INTERPRET=0`` (under the interpreter ``@triton.jit`` does not give a
compilable function), so tests catch such code in CI.

Both compile with the Triton installed here (the lock's) or, given ``triton_path``, with another one: a
folder put first on the compiling process's ``sys.path`` that holds Triton alone. :func:`triton_install`
makes that folder once from a hashed pin (``requirements-triton36.lock``: Triton 3.6.0, what an offline GPU
node with its own torch runs), so the kernels are checked to compile on both versions.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Other Triton versions the kernels must compile on: version -> its hashed pin (a requirements file of one line).
TRITON_PINS = {"3.6.0": REPO / "requirements-triton36.lock"}
TRITON_CACHE = REPO / "build"          # git-ignored: build/triton-<version>-cp<XY>/

_SCRIPT = r"""
import importlib, json, sys
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])       # another Triton, ahead of the installed one
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
spec = json.loads(sys.argv[1])
module = importlib.import_module(spec["module"])
fn = getattr(module, spec["kernel"])
src = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constexprs"])
compiled = triton.compile(src, target=GPUTarget("cuda", spec["capability"], 32))
print(json.dumps({"asm": sorted(compiled.asm), "ptx_chars": len(compiled.asm["ptx"]),
                  "triton": triton.__version__}))
"""


def _compile_env(triton_path, **extra) -> dict:
    # "0", not unset: seqlab.kernels switches the interpreter on when the variable is missing. A Triton of
    # another version compiles into a cache of its own (its kernels' cache keys differ anyway).
    env = dict(os.environ, TRITON_INTERPRET="0", **extra)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if triton_path is not None and not (Path(triton_path) / "triton" / "__init__.py").is_file():
        raise FileNotFoundError(f"triton_path: expected a folder holding a triton package (from "
                                f"triton_install()), got {str(triton_path)!r}")
    return env


def compile_for(module: str, kernel: str, signature: dict, constexprs: dict, capability: int = 80,
                triton_path: str | os.PathLike | None = None) -> dict:
    """Compile ``module.kernel`` for CUDA compute capability ``capability`` (80 = A100, 90 = H100).

    ``signature`` maps every argument to its Triton type (``"*fp32"``, ``"*bf16"``, ``"i32"``, ``"fp32"``,
    or ``"constexpr"``); ``constexprs`` gives the constexpr values; ``triton_path``: compile with the Triton in
    that folder (:func:`triton_install`) instead of the installed one. Returns
    ``{"asm": [stages], "ptx_chars": n, "triton": version}``; raises ``RuntimeError`` with the compiler's
    message on failure.
    """
    env = _compile_env(triton_path)
    spec = json.dumps({"module": module, "kernel": kernel, "signature": signature,
                       "constexprs": constexprs, "capability": capability})
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, spec, str(triton_path or "")], capture_output=True,
                          text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {module}.{kernel} for sm_{capability} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


_USAGE_SCRIPT = r"""
import contextlib, importlib, io, json, re, sys
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])       # another Triton, ahead of the installed one
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
                       dots=[re.sub(r" loc\(.*", "", d) for d in dots], triton=triton.__version__))
print(json.dumps(report))
"""


def ptxas_usage(jobs: list[dict], triton_path: str | os.PathLike | None = None) -> list[dict]:
    """Compile every job in one fresh process as Triton compiles for a real GPU, and return ``ptxas -v``'s
    registers and spill bytes for each: ``ptxas`` runs with Triton's own options (the report comes from
    Triton's ``make_cubin`` with ``TRITON_DUMP_PTXAS_LOG=1``; no Triton cache, so it always runs).
    ``triton_path``: compile with the Triton in that folder (:func:`triton_install`), its own ``ptxas`` included,
    instead of the installed one.

    A job is ``{"module", "kernel", "constexprs", "capability", "dtype"}`` (``dtype``: the pointers' Triton
    type, e.g. ``"fp32"``) and optionally ``"num_warps"`` (the launch's, default 4); arguments in capitals or
    named ``stride*`` are ``i32``, the rest pointers. Each result is the job plus ``registers``,
    ``spill_stores``, ``spill_loads`` (bytes), the ``ptxas`` text, ``dots``, the ``tt.dot`` operations of the
    kernel's Triton IR (the ones written and the ones the compiler made of other code), and ``triton``, the
    version that compiled it.
    """
    env = _compile_env(triton_path, TRITON_DUMP_PTXAS_LOG="1", TRITON_ALWAYS_COMPILE="1")
    proc = subprocess.run([sys.executable, "-c", _USAGE_SCRIPT, str(triton_path or "")], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling for ptxas -v failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def triton_install(version: str = "3.6.0", cache: str | os.PathLike | None = None) -> Path:
    """A folder holding Triton ``version`` alone, for ``triton_path=`` of :func:`ptxas_usage` and
    :func:`compile_for`: ``pip install --no-deps --require-hashes --target`` of its hashed pin
    (:data:`TRITON_PINS`) into ``<cache>/triton-<version>-cp<XY>`` (default ``build/``, git-ignored), made once
    and reused while the pin is unchanged; a file lock keeps two test workers from installing it together.
    Raises ``ValueError`` for a version without a pin and ``RuntimeError`` with pip's message if pip fails
    (no network and no wheel in pip's cache)."""
    from filelock import FileLock

    if version not in TRITON_PINS:
        raise ValueError(f"version: expected one of {sorted(TRITON_PINS)} (seqlab.kernels.aot.TRITON_PINS), got "
                         f"{version!r}")
    pin = TRITON_PINS[version]
    target = Path(cache or TRITON_CACHE) / f"triton-{version}-cp{sys.version_info.major}{sys.version_info.minor}"
    stamp = target / ".seqlab-pin"
    wanted = hashlib.sha256(pin.read_bytes()).hexdigest()
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if stamp.is_file() and stamp.read_text() == wanted:
            return target
        cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-deps",
               "--require-hashes", "--no-compile", "--upgrade", "--target", str(target), "-r", str(pin)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"installing Triton {version} into {target} failed ({' '.join(cmd)}):\n"
                               f"{proc.stderr[-3000:]}")
        stamp.write_text(wanted)
    return target
