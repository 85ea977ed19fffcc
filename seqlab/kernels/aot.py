"""Ahead-of-time compilation of a kernel for a real GPU target, without a GPU, and its register report.

The CPU interpreter accepts code that the compiler rejects (non-constexpr shapes, unsupported
dtypes, ...). ``compile_for`` compiles a kernel to PTX/cubin for ``sm_80`` or ``sm_90`` in a fresh
Python process with ``TRITON_INTERPRET=0`` (under the interpreter ``@triton.jit`` does not give a
compilable function), so tests catch such code in CI.

Both compile with the Triton installed here (the lock's) or, given ``triton_path``, with another one: a
folder put first on the compiling process's ``sys.path`` that holds Triton alone. :func:`triton_install`
makes that folder once from a hashed pin (``requirements-triton36.lock``: Triton 3.6.0, what an offline GPU
node with its own torch runs), so the kernels are checked to compile on both versions.

A compile's report changes only with the kernel's source, its launch, the architecture and the Triton version:
:func:`usage_with_record` keeps the reports of many jobs in a JSON record keyed by a hash of those
(:func:`job_key`; :func:`jit_digest` hashes a kernel with every ``@triton.jit`` helper it calls and every constant it
reads) and compiles only the jobs the record lacks (:func:`record_mode`: write them back, leave the file alone, or
refuse).
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
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


# ----------------------------------------------------------------------------------------- the spill record
# ``ptxas_usage``'s answer for one job changes only when the kernel's source, its launch, the architecture or the
# Triton that compiles it changes. ``usage_with_record`` keeps the answers in a committed JSON file keyed by a hash
# of exactly those, and compiles only the jobs whose key the file lacks.
RECORD_MODES = {
    "write": "compile the configurations the record lacks and write them into it (the default outside CI)",
    "readonly": "compile the configurations the record lacks, leave the file alone (the default where CI is set)",
    "strict": "compile nothing: fail, naming the configurations the record lacks",
    "rebuild": "compile every configuration again and rewrite the record's entries for this Triton",
}
RECORD_MODE_VARIABLE = "SEQLAB_SPILL_RECORD"
# Variables that change what Triton and ptxas make of a kernel (the compile's own are set by _compile_env).
_CODEGEN_VARIABLES = ("TRITON_DEFAULT_FP_FUSION", "TRITON_F32_DEFAULT", "TRITON_PTXAS_PATH")
_MEASURED = ("registers", "spill_stores", "spill_loads", "dots")
_CONSTANT_TYPES = (bool, int, float, complex, str, bytes, type(None))


class RecordWarning(UserWarning):
    """Configurations compiled because the spill record lacked them."""


def jit_source(fn) -> str:
    """The source text of the Python function ``fn`` (under a ``@triton.jit``), its decorators included."""
    return textwrap.dedent(inspect.getsource(fn))


def _python_function(obj):
    """The Python function a ``@triton.jit`` object wraps (a ``JITFunction``, or an ``InterpretedFunction``
    under the interpreter), else None."""
    while type(obj).__module__.startswith("triton") and hasattr(obj, "fn"):
        obj = obj.fn
        if inspect.isfunction(obj):
            return obj
    return None


def _dotted_names(tree: ast.AST) -> set[str]:
    """Every name the code reads, and every dotted chain of attributes on a name (``tl.sum``, ``mod.helper``)."""
    names = set()
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            names.add(".".join([node.id, *reversed(parts)]))
    return names


def _resolve(dotted: str, namespace: dict):
    """What ``dotted`` names in ``namespace``, or None; names reached through Triton itself resolve to None
    (the Triton version is in the key)."""
    head, *rest = dotted.split(".")
    obj = namespace.get(head)
    for attr in rest:
        if inspect.ismodule(obj) and obj.__name__.split(".")[0] == "triton":
            return None
        obj = getattr(obj, attr, None)
    if inspect.ismodule(obj) and obj.__name__.split(".")[0] == "triton":
        return None
    return obj


def _is_constant(obj) -> bool:
    """Whether ``obj`` is a value whose ``repr`` is stable (numbers, strings, ``tl.constexpr``, tuples of them)."""
    if type(obj).__name__ == "constexpr":
        return _is_constant(obj.value)
    if isinstance(obj, tuple):
        return all(_is_constant(o) for o in obj)
    return isinstance(obj, _CONSTANT_TYPES)


def jit_digest(jitted, _memo: dict | None = None) -> str:
    """sha256 of a ``@triton.jit`` function as the compiler sees it: its source, and, for every name it reads,
    the digest of the ``@triton.jit`` function it names (so a change to a helper, at any depth, changes it) or
    the value of the constant it names (``tl.constexpr``, numbers, strings, tuples). Lines moving in the file
    leave it unchanged."""
    memo = {} if _memo is None else _memo
    fn = _python_function(jitted)
    if fn is None:
        raise TypeError(f"jitted: expected a @triton.jit function, got {type(jitted).__name__}")
    if fn not in memo:
        memo[fn] = "(recursive)"
        source = jit_source(fn)
        parts = [source]
        for dotted in sorted(_dotted_names(ast.parse(source))):
            obj = _resolve(dotted, fn.__globals__)
            if _python_function(obj) is not None:
                parts.append(f"{dotted} = jit {jit_digest(obj, memo)}")
            elif _is_constant(obj):
                parts.append(f"{dotted} = {obj!r}")
        memo[fn] = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return memo[fn]


def installed_triton_version() -> str:
    """The version of the Triton installed here, the one ``ptxas_usage`` compiles with by default."""
    return importlib.metadata.version("triton")


def locked_triton_version(lock: str | os.PathLike = REPO / "requirements.lock") -> str:
    """The Triton version ``requirements.lock`` pins (what ``workbench.py`` installs)."""
    found = re.search(r"^triton==([^\s;]+)", Path(lock).read_text(), re.MULTILINE)
    if not found:
        raise ValueError(f"lock: expected a line triton==VERSION in {lock}")
    return found.group(1)


def covered_triton_versions() -> list[str]:
    """The Triton versions the kernels are checked on, the record's: the locked one and the pinned ones."""
    return sorted({locked_triton_version(), *TRITON_PINS})


def _compile_recipe() -> str:
    """What else decides a compile's outcome: the compiling script and the code-generation variables."""
    env = {name: os.environ.get(name) for name in _CODEGEN_VARIABLES}
    env["TRITON_DEFAULT_FP_FUSION"] = env["TRITON_DEFAULT_FP_FUSION"] or "1"     # _compile_env's default
    return hashlib.sha256((_USAGE_SCRIPT + json.dumps(env, sort_keys=True)).encode()).hexdigest()


def job_key(job: dict, triton_version: str, digest: str, recipe: str | None = None) -> str:
    """The record's key of one ``ptxas_usage`` job: a hash of its kernel's :func:`jit_digest`, its launch (module,
    kernel, constexprs, warps, the pointers' dtype), its architecture, the Triton version and the compile recipe."""
    launch = {k: job.get(k) for k in ("module", "kernel", "constexprs", "capability", "dtype")}
    launch.update(num_warps=job.get("num_warps", 4), triton=triton_version, source=digest,
                  recipe=recipe or _compile_recipe())
    return hashlib.sha256(json.dumps(launch, sort_keys=True).encode()).hexdigest()[:24]


_DIGEST_SCRIPT = r"""
import importlib, json, sys
from seqlab.kernels.aot import jit_digest
memo = {}
pairs = json.loads(sys.stdin.read())
print(json.dumps([jit_digest(getattr(importlib.import_module(m), k), memo) for m, k in pairs]))
"""


def kernel_digests(pairs) -> dict:
    """:func:`jit_digest` of every ``(module, kernel)`` as the compiling process sees it: in a fresh process
    with ``TRITON_INTERPRET=0``, as ``ptxas_usage`` compiles (a constant such as the one saying whether the
    interpreter runs has another value in the tests' own process)."""
    pairs = sorted(set(pairs))
    proc = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], input=json.dumps(pairs), capture_output=True,
                          text=True, env=_compile_env(None), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"hashing the kernels' sources failed:\n{proc.stderr[-4000:]}")
    return dict(zip(pairs, json.loads(proc.stdout.strip().splitlines()[-1])))


def job_keys(jobs: list[dict], triton_version: str, digests: dict | None = None) -> list[str]:
    """:func:`job_key` of every job; ``digests``: ``(module, kernel) -> jit_digest``, default
    :func:`kernel_digests`'s."""
    digests = digests or kernel_digests((j["module"], j["kernel"]) for j in jobs)
    recipe = _compile_recipe()
    return [job_key(j, triton_version, digests[j["module"], j["kernel"]], recipe) for j in jobs]


def load_record(path: str | os.PathLike) -> dict:
    """The record's entries, key -> entry (the job's fields, ``triton`` and the measurements); {} without a file."""
    path = Path(path)
    return json.loads(path.read_text())["entries"] if path.is_file() else {}


def _entry(result: dict) -> dict:
    fields = ("triton", "module", "kernel", "capability", "num_warps", "dtype", "constexprs", *_MEASURED)
    return {f: result.get(f, 4 if f == "num_warps" else None) for f in fields}


def _entry_order(item) -> tuple:
    e = item[1]
    return e["triton"], e["module"], e["kernel"], e["capability"], json.dumps(e["constexprs"]), e["num_warps"]


def save_record(path: str | os.PathLike, fresh: dict, triton_version: str, keep: set[str]) -> None:
    """Merge ``fresh`` (key -> entry) into the record at ``path`` under a file lock: entries of
    ``triton_version`` whose key is not in ``keep`` go (configurations no longer launched, old sources), and so
    do those of Triton versions no longer covered (neither installed, locked nor pinned). One entry a line, in order."""
    from filelock import FileLock

    path = Path(path)
    covered = {installed_triton_version(), *covered_triton_versions()}
    with FileLock(str(path) + ".lock"):
        entries = {k: e for k, e in load_record(path).items()
                   if e["triton"] in covered and (e["triton"] != triton_version or k in keep)}
        entries.update(fresh)
        lines = [f"{json.dumps(k)}: {json.dumps(e)}" for k, e in sorted(entries.items(), key=_entry_order)]
        about = ("ptxas -v of every Triton kernel configuration, keyed by seqlab.kernels.aot.job_key; written by "
                 "tests/ops/test_triton_spills.py")
        text = "{\n" + f'"about": {json.dumps(about)},\n"entries": {{\n' + ",\n".join(lines) + "\n}}\n"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def record_mode() -> str:
    """How ``usage_with_record`` treats the record: ``$SEQLAB_SPILL_RECORD``, else ``readonly`` where ``$CI`` is
    set and ``write`` elsewhere (:data:`RECORD_MODES`)."""
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
    mode = os.environ.get(RECORD_MODE_VARIABLE) or ("readonly" if ci else "write")
    if mode not in RECORD_MODES:
        raise ValueError(f"{RECORD_MODE_VARIABLE}: expected one of {sorted(RECORD_MODES)}, got {mode!r}")
    return mode


def describe_jobs(jobs: list[dict], most: int = 12) -> str:
    """One line per job (kernel, architecture, constexprs, warps), at most ``most``, then a count per kernel."""
    lines = [f"  {j['kernel']} sm_{j['capability']} {j['constexprs']} warps={j.get('num_warps', 4)}"
             for j in jobs[:most]]
    if len(jobs) > most:
        counts = {}
        for j in jobs:
            counts[j["kernel"]] = counts.get(j["kernel"], 0) + 1
        lines.append(f"  ... {len(jobs) - most} more; by kernel: "
                     + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    return "\n".join(lines)


def _compile_jobs(jobs: list[dict], triton_version: str) -> list[dict]:
    """``ptxas_usage`` of ``jobs`` with the installed Triton or, for a pinned version, its folder (installed now
    if missing); refuses results from another Triton than the key says."""
    pinned = triton_version != installed_triton_version()
    results = ptxas_usage(jobs, triton_path=triton_install(triton_version) if pinned else None)
    wrong = {r["triton"] for r in results} - {triton_version}
    if wrong:
        raise RuntimeError(f"compiled with Triton {sorted(wrong)}, expected {triton_version}")
    return results


def usage_with_record(jobs: list[dict], record: str | os.PathLike, triton_version: str | None = None,
                      mode: str | None = None, refresh: str = "", digests: dict | None = None) -> list[dict]:
    """``ptxas_usage(jobs)`` for Triton ``triton_version`` (default the installed one; a pinned one compiles
    from :func:`triton_install`), answered from the record at ``record`` where it holds a job's
    :func:`job_key`, compiled where it does not. ``jobs`` is every configuration of that Triton: in ``write`` and
    ``rebuild`` mode (:func:`record_mode`) the record keeps those alone. Each result is the job plus
    ``triton``, ``registers``, ``spill_stores``, ``spill_loads``, ``dots`` (as ``ptxas_usage``), ``key`` and
    ``recorded`` (True where the record answered). Compiled jobs are reported with a :class:`RecordWarning`
    (``refresh``: the command that writes them into the record); in ``strict`` mode missing ones raise
    ``LookupError`` instead. ``digests``: the kernels' :func:`kernel_digests`, if already computed."""
    version = triton_version or installed_triton_version()
    mode = mode or record_mode()
    keys = job_keys(jobs, version, digests)
    known = {} if mode == "rebuild" else load_record(record)
    missing = {k: j for j, k in zip(jobs, keys) if k not in known}
    if missing and mode == "strict":
        raise LookupError(_missing_message(list(missing.values()), len(jobs), version, record, refresh, mode))
    fresh = dict(zip(missing, _compile_jobs(list(missing.values()), version))) if missing else {}
    if fresh and mode in ("write", "rebuild"):
        save_record(record, {k: _entry(r) for k, r in fresh.items()}, version, set(keys))
    if fresh:
        warnings.warn(_missing_message(list(missing.values()), len(jobs), version, record, refresh, mode),
                      RecordWarning, stacklevel=2)
    return [_result(j, k, known, fresh) for j, k in zip(jobs, keys)]


def _result(job: dict, key: str, known: dict, fresh: dict) -> dict:
    if key in fresh:
        return dict(fresh[key], key=key, recorded=False)
    measured = {f: known[key][f] for f in ("triton", *_MEASURED)}
    return dict(job, **measured, key=key, recorded=True)


def _missing_message(missing: list[dict], total: int, version: str, record, refresh: str, mode: str) -> str:
    """What the record lacked, what was done about it (by ``mode``) and how to refresh it."""
    done = {"strict": ":", "readonly": "; compiled them:", "write": "; compiled them:", "rebuild": "; compiled:"}
    head = (f"Triton {version}: {len(missing)} of {total} kernel configurations not in the spill record {record}"
            if mode != "rebuild" else f"Triton {version}: the record {record} rebuilt, all {total} compiled")
    if mode in ("write", "rebuild"):
        tail = "Written into the record: commit it."
    else:
        done_here = "Nothing compiled" if mode == "strict" else "Not written"
        tail = f"{done_here} ({RECORD_MODE_VARIABLE}={mode}); refresh the record with " \
               f"{RECORD_MODE_VARIABLE}=write {refresh}".rstrip() + " and commit it."
    return "\n".join([head + done[mode], describe_jobs(missing), tail])
