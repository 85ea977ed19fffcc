"""The CUDA kernels, timed on a GPU, written to ``benchmarks/results/gpu-<gpu>-<date>.json`` (``python3
workbench.py gpu-check`` runs it; the CPU timings are in the other scripts).

    python3 benchmarks/gpu.py                 # every table, the record written
    python3 benchmarks/gpu.py --tables scan   # one table; --no-write prints only

Every time is the median over repeated calls between two CUDA events, each call after a warm-up and with the
L2 cache flushed before it (:func:`cuda_ms`). Two kinds of rows:

- **op**: the public function (``linear_scan``, ``gateloop``) as a user calls it, with its checks, its
  conversions and any host synchronisation it makes;
- **kernel**: one Triton kernel alone. The op runs once with its launches recorded
  (:func:`recorded_launches`: every ``kernel[grid](...)`` of any module, its arguments kept), then each
  launch is replayed on its own between the events. The kernels' sum against the op is the wrapper's cost.

Each row carries the bytes a pass must move and the FLOPs it must do, as formulas of the shapes
(:func:`scan_work`, :func:`gateloop_work`: the minimum of the algorithm, not what the code happens to
move), the achieved rate and its share of the GPU's peak (:data:`PEAKS`, by device name; an unknown GPU
is said to be unknown and gets no share). float32 throughout. The record ends with the kernels' GPU targets
read off the rows (:func:`targets`), each met, not met or not measured.

Tables (the shapes of the scan and GateLoop kernels' targets):

1. ``scan``: ``linear_scan(mode="triton")`` forward and backward, B = 8, D in {512, 1536}, L in {4096,
   16384}, with its error against float64; ``accelerated-scan`` (its ``warp`` and ``triton`` scans, in its
   own ``(B, D, L)`` layout) at the same shapes when installed.
2. ``gateloop``: ``gateloop(mode="triton")``, real transitions, B = 4, 8 heads of dk = dv = 64, L in
   {1024, 16384}, forward and forward + backward at each ``tl.dot`` precision the op takes
   (``precision=``, when its signature has it), its error against float64 (``mode="chunked"`` in float64)
   beside; flash-linear-attention's ``chunk_gla`` (the same recurrence with ``g = log a`` and scale 1) in the
   same run at its float32 default, which is TF32: the rows of equal precision are compared.
3. ``paper``: GateLoop at the paper's setting, B = 4, 64 heads of dk = dv = 1, L = 16384 (App. C).
4. ``decay``: paper 003 Fig. 2, non-causal 1 scan (additive) against 2 scans (multiplicative), B = 1,
   4 heads of 64.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import inspect
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SCHEMA = "seqlab-gpu-benchmark/1"
DEVICE = "cuda"         # where the tables put their tensors (a test runs their logic on the CPU interpreter)
PRECISIONS = ("ieee", "tf32x3", "tf32", "bf16")

# Dense peaks by device name (NVIDIA's data sheets; no sparsity): memory bandwidth, float32 on the CUDA cores,
# TF32 and bfloat16 on the tensor cores. The first key contained in torch's device name wins.
PEAKS = {
    "H100 PCIe": dict(bandwidth=2.0e12, fp32=51.2e12, tf32=378e12, bf16=756e12),
    "H100 NVL": dict(bandwidth=3.9e12, fp32=60e12, tf32=417e12, bf16=835e12),
    "H100": dict(bandwidth=3.35e12, fp32=67e12, tf32=494.7e12, bf16=989.4e12),        # SXM5, "H100 80GB HBM3"
    "H200 NVL": dict(bandwidth=4.8e12, fp32=60e12, tf32=417e12, bf16=835e12),
    "H200": dict(bandwidth=4.8e12, fp32=67e12, tf32=494.7e12, bf16=989.4e12),         # SXM
    "A100-SXM4-80GB": dict(bandwidth=2.039e12, fp32=19.5e12, tf32=156e12, bf16=312e12),
    "A100-SXM4-40GB": dict(bandwidth=1.555e12, fp32=19.5e12, tf32=156e12, bf16=312e12),
    "A100 80GB PCIe": dict(bandwidth=1.935e12, fp32=19.5e12, tf32=156e12, bf16=312e12),
    "A100-PCIE-40GB": dict(bandwidth=1.555e12, fp32=19.5e12, tf32=156e12, bf16=312e12),
}
# The peak a tl.dot precision runs against: "tf32x3" is three TF32 products per product.
PEAK_OF_PRECISION = {"ieee": ("fp32", 1), "tf32x3": ("tf32", 3), "tf32": ("tf32", 1), "bf16": ("bf16", 1)}


def gpu_peaks(name: str) -> tuple[str, dict] | None:
    """``(table key, peaks)`` for a device name as torch gives it, or None for a GPU not in :data:`PEAKS`."""
    for key, peaks in PEAKS.items():
        if key in name:
            return key, peaks
    return None


def peak_bandwidth(props) -> float | None:
    """Peak DRAM bandwidth in bytes/s: ``2 x memory clock x bus width`` (double data rate) when the device
    properties carry them (a cross-check of :data:`PEAKS`), else from :data:`PEAKS` by name, else None."""
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8
    found = gpu_peaks(getattr(props, "name", ""))
    return found[1]["bandwidth"] if found else None


def peak_flops(peaks: dict, precision: str) -> float:
    """The FLOP/s a product at ``precision`` can reach: TF32x3 does three TF32 products for one."""
    unit, passes = PEAK_OF_PRECISION[precision]
    return peaks[unit] / passes


class Work(NamedTuple):
    """What a pass must do at least: bytes moved to and from memory and FLOPs, with their formulas."""
    bytes: int
    flops: int
    bytes_formula: str
    flops_formula: str

    def __add__(self, other: "Work") -> "Work":
        return Work(self.bytes + other.bytes, self.flops + other.flops,
                    f"{self.bytes_formula} + {other.bytes_formula}", f"{self.flops_formula} + {other.flops_formula}")


def scan_work(pass_: str, B: int, L: int, D: int, itemsize: int = 4) -> Work:
    """``h_t = a_t h_{t-1} + x_t`` over ``(B, L, D)``: forward reads ``a, x`` and writes ``h`` (one FMA a step);
    backward reads ``a, h, dL/dh`` and writes ``dL/dx, dL/da`` (``dx_t = g_t + a_{t+1} dx_{t+1}``,
    ``da_t = dx_t h_{t-1}``: three FLOPs a step)."""
    n = B * L * D
    if pass_ == "forward":
        return Work(3 * n * itemsize, 2 * n, f"{itemsize} bytes x 3 B L D (read a, x; write h)", "2 B L D")
    if pass_ == "backward":
        return Work(5 * n * itemsize, 3 * n, f"{itemsize} bytes x 5 B L D (read a, h, dh; write dx, da)", "3 B L D")
    raise ValueError(f"pass_: expected 'forward' or 'backward', got {pass_!r}")


# GateLoop's chunked algorithm per head (N = B H heads, chunks of C steps, T = ceil(L / C) chunks, K = dk,
# V = dv): the kernels' roles, the bytes each must move and the products it must do. Backward is the adjoint
# of each product (twice the forward's FLOPs): the adjoint states (q~^T dy per chunk), dq/dk/d log a
# (P = dy v^T, dq = P k~ + dy S^T, dk = P^T q~ + v dS^T) and dv (A^T dy + k~ dS).
_GATELOOP_ROLES = {
    #  role: (bytes as (per step, per chunk) multiples of N, FLOPs per step, the formulas)
    "states": (lambda K, V, C: (2 * K + V, K * V), lambda K, V, C: 2 * K * V,
               "(L (2K + V) + T K V) (read k, log a, v; write the states entering each chunk)", "2 N L K V"),
    "attention": (lambda K, V, C: (3 * K, C * C), lambda K, V, C: 2 * C * K,
                  "(3 L K + T C^2) (read q, k, log a; write A)", "2 N L C K"),
    "output": (lambda K, V, C: (2 * K + 2 * V, K * V + C * C), lambda K, V, C: 2 * (K * V + C * V),
               "(L (2K + 2V) + T (K V + C^2)) (read q, log a, v, states, A; write y)", "2 N L (K V + C V)"),
    "adjoint": (lambda K, V, C: (2 * K + V, K * V), lambda K, V, C: 2 * K * V,
                "(L (2K + V) + T K V) (read q, log a, dy; write the adjoint states)", "2 N L K V"),
    "dqk": (lambda K, V, C: (6 * K + 2 * V, 2 * K * V), lambda K, V, C: 2 * (2 * C * K + 2 * K * V + C * V),
            "(L (6K + 2V) + 2 T K V) (read q, k, log a, v, dy, states, adjoint states; write dq, dk, d log a)",
            "2 N L (2 C K + 2 K V + C V)"),
    "dv": (lambda K, V, C: (2 * K + 2 * V, K * V + C * C), lambda K, V, C: 2 * (C * V + K * V),
           "(L (2K + 2V) + T (K V + C^2)) (read k, log a, dy, adjoint states, A; write dv)", "2 N L (C V + K V)"),
}
GATELOOP_FORWARD_ROLES = ("states", "attention", "output")
GATELOOP_BACKWARD_ROLES = ("adjoint", "dqk", "dv")


def gateloop_role(kernel: str) -> str | None:
    """The role of a GateLoop kernel, read from its name (``chunk_dqk_kernel`` -> ``"dqk"``), or None."""
    name = kernel.lower()
    for role, words in (("adjoint", ("adjoint",)), ("dqk", ("dqk", "dq_", "_dq")), ("dv", ("dv",)),
                        ("states", ("state",)), ("attention", ("attention", "attn")), ("output", ("output", "_o_"))):
        if any(w in name for w in words):
            return role
    return None


def gateloop_work(role: str, B: int, H: int, L: int, K: int, V: int, C: int, itemsize: int = 4) -> Work:
    """The bytes and FLOPs of one role of the chunked algorithm (``_GATELOOP_ROLES``), or of a whole pass:
    ``role`` ``"forward"`` (states + attention + output) or ``"backward"`` (adjoint + dqk + dv)."""
    if role in ("forward", "backward"):
        roles = GATELOOP_FORWARD_ROLES if role == "forward" else GATELOOP_BACKWARD_ROLES
        total = gateloop_work(roles[0], B, H, L, K, V, C, itemsize)
        for r in roles[1:]:
            total = total + gateloop_work(r, B, H, L, K, V, C, itemsize)
        return total
    if role not in _GATELOOP_ROLES:
        raise ValueError(f"role: expected one of {sorted(_GATELOOP_ROLES)} or 'forward' / 'backward', got {role!r}")
    per_bytes, per_step_flops, bytes_formula, flops_formula = _GATELOOP_ROLES[role]
    N, T = B * H, -(-L // C)
    step, chunk = per_bytes(K, V, C)
    return Work(itemsize * N * (L * step + T * chunk), N * L * per_step_flops(K, V, C),
                f"{itemsize} bytes x N {bytes_formula}", flops_formula)


def gateloop_op_work(pass_: str, B: int, H: int, L: int, K: int, V: int, itemsize: int = 4) -> Work:
    """The op's minimum traffic, whatever its algorithm: forward reads ``q, k, log a, v`` and writes ``y``;
    backward reads them and ``dy`` and writes ``dq, dk, d log a, dv``. FLOPs: the state update and the
    readout, ``2 N L K V`` each (backward twice that)."""
    N = B * H
    if pass_ == "forward":
        return Work(itemsize * N * L * (3 * K + 2 * V), 4 * N * L * K * V,
                    f"{itemsize} bytes x N L (3K + 2V) (read q, k, log a, v; write y)", "4 N L K V")
    if pass_ == "backward":
        return Work(itemsize * N * L * (6 * K + 3 * V), 8 * N * L * K * V,
                    f"{itemsize} bytes x N L (6K + 3V) (read q, k, log a, v, dy; write dq, dk, d log a, dv)",
                    "8 N L K V")
    if pass_ == "forward+backward":
        return (gateloop_op_work("forward", B, H, L, K, V, itemsize)
                + gateloop_op_work("backward", B, H, L, K, V, itemsize))
    raise ValueError(f"pass_: expected 'forward', 'backward' or 'forward+backward', got {pass_!r}")


ROW_KEYS = {"table": str, "name": str, "what": str, "pass": str, "shape": dict, "precision": str, "ms": float}
OPTIONAL_ROW_KEYS = ("bytes", "bytes_formula", "flops", "flops_formula", "GBps", "TFLOPs", "share_of_peak_bandwidth",
                     "share_of_peak_flops", "error_vs_float64", "note")
ROW_KINDS = ("op", "kernel", "kernels", "peer", "peer-kernel")


def make_row(table: str, name: str, what: str, pass_: str, shape: dict, precision: str, ms: float,
             work: Work | None = None, peaks: dict | None = None, **extra) -> dict:
    """One row of the record: a time, and where ``work`` is known its rates and (on a GPU of :data:`PEAKS`)
    their shares of the peaks. ``extra``: ``error_vs_float64`` (a dict), ``note``."""
    row = {"table": table, "name": name, "what": what, "pass": pass_, "shape": dict(shape), "precision": precision,
           "ms": float(ms)}
    if work is not None and ms > 0:
        seconds = ms * 1e-3
        row.update(bytes=work.bytes, bytes_formula=work.bytes_formula, flops=work.flops,
                   flops_formula=work.flops_formula, GBps=work.bytes / seconds / 1e9,
                   TFLOPs=work.flops / seconds / 1e12)
        if peaks is not None:
            row["share_of_peak_bandwidth"] = work.bytes / seconds / peaks["bandwidth"]
            row["share_of_peak_flops"] = work.flops / seconds / peak_flops(peaks, precision)
    row.update({k: v for k, v in extra.items() if v is not None})
    return row


def _rows(rows, **match) -> list[dict]:
    return [r for r in rows if all(r.get(k.rstrip("_")) == v for k, v in match.items())]


def _target(what: str, value, limit: float, at_most: bool, note: str | None = None) -> dict:
    met = None if value is None else (value <= limit if at_most else value >= limit)
    return {"target": what, "value": value, "limit": limit, "met": met, **({"note": note} if note else {})}


def targets(rows: list[dict]) -> list[dict]:
    """The GPU targets of the kernels, read off the rows: the scan forward at >= 60 % of the peak bandwidth and
    faster than accelerated-scan at (8, 1536, 16384); GateLoop within 2x of fla's ``chunk_gla`` forward and 2.5x
    forward + backward at the same precision; the paper's setting at <= 0.5 ms forward + backward. ``met`` is
    None where the value is unknown (an unknown GPU's share, a peer not installed)."""
    out = []
    for r in _rows(rows, table="scan", what="op", pass_="forward"):
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        out.append(_target(f"scan forward, {shape}: share of peak bandwidth", r.get("share_of_peak_bandwidth"),
                           0.6, at_most=False))
        for peer in _rows(rows, table="scan", what="peer", pass_="forward", shape=r["shape"]):
            if r["shape"] == dict(B=8, L=16384, D=1536):
                out.append(_target(f"scan forward, {shape}: time / {peer['name']}'s", r["ms"] / peer["ms"], 1.0,
                                   at_most=True))
    for fla in _rows(rows, table="gateloop", name="fla.chunk_gla", what="peer"):
        same = _rows(rows, table="gateloop", name="gateloop", what="op", pass_=fla["pass"], shape=fla["shape"],
                     precision=fla["precision"])
        ours = same or _rows(rows, table="gateloop", name="gateloop", what="op", pass_=fla["pass"],
                             shape=fla["shape"], precision="ieee")
        if ours:
            note = None if same else ("not the same precision: seqlab ieee (the op takes no precision=), fla "
                                      + fla["precision"])
            out.append(_target(f"gateloop {fla['pass']}, L={fla['shape'].get('L')}: time / fla chunk_gla's",
                               ours[0]["ms"] / fla["ms"], 2.0 if fla["pass"] == "forward" else 2.5, True, note))
    for r in _rows(rows, table="paper", what="op", pass_="forward+backward"):
        out.append(_target("the paper's setting (B 4, 64 heads of 1, L 16384) forward + backward, ms", r["ms"], 0.5,
                           at_most=True))
    return out


def validate_record(record: dict) -> None:
    """Raise ``ValueError`` naming the first field of ``record`` that does not follow the schema."""
    def need(cond, what):
        if not cond:
            raise ValueError(f"gpu benchmark record: {what}")

    need(record.get("schema") == SCHEMA, f"schema: expected {SCHEMA!r}, got {record.get('schema')!r}")
    need(re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(record.get("date", ""))), "date: expected YYYY-MM-DD")
    gpu = record.get("gpu")
    need(isinstance(gpu, dict) and isinstance(gpu.get("name"), str), "gpu.name: expected a string")
    need(gpu.get("peaks") is None or set(gpu["peaks"]) == {"bandwidth", "fp32", "tf32", "bf16"},
         "gpu.peaks: expected null or bandwidth, fp32, tf32, bf16")
    need(isinstance(record.get("software"), dict) and "torch" in record["software"] and "triton" in record["software"],
         "software: expected the torch and triton versions")
    need(all(isinstance(record.get(k), list) for k in ("missing", "failures", "targets")),
         "missing, failures, targets: expected lists")
    for i, t in enumerate(record["targets"]):
        need(set(t) - {"note"} == {"target", "value", "limit", "met"},
             f"targets[{i}]: expected target, value, limit, met")
    rows = record.get("rows")
    need(isinstance(rows, list), "rows: expected a list")
    for i, row in enumerate(rows):
        for key, kind in ROW_KEYS.items():
            need(isinstance(row.get(key), kind), f"rows[{i}].{key}: expected {kind.__name__}, got {row.get(key)!r}")
        need(row["what"] in ROW_KINDS, f"rows[{i}].what: expected one of {ROW_KINDS}, got {row['what']!r}")
        need(row["ms"] > 0, f"rows[{i}].ms: expected a positive time, got {row['ms']}")
        unknown = set(row) - set(ROW_KEYS) - set(OPTIONAL_ROW_KEYS)
        need(not unknown, f"rows[{i}]: unknown fields {sorted(unknown)}")
        if "share_of_peak_bandwidth" in row:
            need(gpu.get("peaks") is not None, f"rows[{i}]: a share of the peak on a GPU whose peaks are unknown")


def record_path(gpu_name: str, date: str, folder: Path = RESULTS) -> Path:
    """``benchmarks/results/gpu-<gpu>-<date>.json``, the GPU's name in lower-case words joined by dashes
    (``NVIDIA H100 80GB HBM3`` -> ``gpu-nvidia-h100-80gb-hbm3-2026-11-26.json``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return folder / f"gpu-{slug}-{date}.json"


# --- launches, recorded and replayed ---------------------------------------------------------------------------

class Launch(NamedTuple):
    """One ``kernel[grid](*args, **kwargs)``: enough to launch it again alone."""
    name: str
    kernel: object
    grid: object
    args: tuple
    kwargs: dict

    def replay(self):
        return self.kernel[self.grid](*self.args, **self.kwargs)


def kernel_name(kernel) -> str:
    """The Python name of a Triton kernel, through autotuners and heuristics (``.fn`` down to the function)."""
    while hasattr(kernel, "fn"):
        kernel = kernel.fn
    return getattr(kernel, "__name__", type(kernel).__name__)


@contextlib.contextmanager
def recorded_launches():
    """Record every Triton launch ``kernel[grid](...)`` made inside the block, from any module (an autotuner's
    own trial launches are not ``[grid]`` launches and are not recorded): yields the list it fills. The
    arguments are kept, so each launch can be replayed alone (:meth:`Launch.replay`)."""
    from triton.runtime.jit import KernelInterface

    launches: list[Launch] = []
    original = KernelInterface.__getitem__

    def getitem(self, grid):
        launch = original(self, grid)

        def run(*args, **kwargs):
            launches.append(Launch(kernel_name(self), self, grid, args, kwargs))
            return launch(*args, **kwargs)
        return run

    KernelInterface.__getitem__ = getitem
    try:
        yield launches
    finally:
        KernelInterface.__getitem__ = original


# --- timing (CUDA) ---------------------------------------------------------------------------------------------

_FLUSH: list[torch.Tensor] = []


def cuda_ms(fn, *, budget_ms: float = 300.0, min_reps: int = 5, max_reps: int = 100) -> float:
    """Median milliseconds of ``fn()`` between two CUDA events; one warm-up call, the L2 cache flushed (a
    256 MB write) before every call, as many calls as fit ``budget_ms`` within ``[min_reps, max_reps]``."""
    if not _FLUSH:
        _FLUSH.append(torch.empty(64 * 2 ** 20, dtype=torch.int32, device=DEVICE))
    fn()
    torch.cuda.synchronize()
    times: list[float] = []
    while len(times) < max_reps and (len(times) < min_reps or sum(times) < budget_ms):
        _FLUSH[0].zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def relative_errors(ours: dict, reference: dict) -> dict:
    """``|ours - ref| / |ref|`` for every tensor both name (``y``, ``dq``, ...)."""
    from seqlab.ops import relative_error

    return {k: float(relative_error(ours[k].double(), reference[k].double())) for k in ours if k in reference}


def kernel_rows(table, launches, pass_, shape, precision, peaks, work_of=None, total_work=None,
                prefix="") -> list[dict]:
    """A row per recorded launch, replayed alone (``work_of(kernel name)``: its work, or None), and one for
    their sum (``total_work``: the pass's)."""
    rows, total = [], 0.0
    for launch in launches:
        ms = cuda_ms(launch.replay)
        total += ms
        work = work_of(launch.name) if work_of else (total_work if len(launches) == 1 else None)
        rows.append(make_row(table, prefix + launch.name, "peer-kernel" if prefix else "kernel", pass_, shape,
                             precision, ms, work, peaks))
    if launches:
        rows.append(make_row(table, prefix + f"{len(launches)} kernels", "kernels", pass_, shape, precision, total,
                             total_work, peaks))
    return rows


# --- the tables ------------------------------------------------------------------------------------------------

def _accelerated_scans() -> tuple[dict, list[str]]:
    """accelerated-scan's CUDA (``warp``) and Triton scans that import here, and a line for each that does not."""
    import importlib.util

    if importlib.util.find_spec("accelerated_scan") is None:
        return {}, ["accelerated-scan is not installed (pip install accelerated-scan): no scan peer rows"]
    found, missing = {}, []
    for name in ("warp", "triton"):
        try:
            found[f"accelerated_scan.{name}"] = importlib.import_module(f"accelerated_scan.{name}").scan
        except Exception as err:     # its CUDA extension did not build here (it compiles with nvcc at import)
            missing.append(f"accelerated_scan.{name} does not import: {type(err).__name__}: {err}"[:300])
    return found, missing


def scan_table(peaks, lengths=(4096, 16384), widths=(512, 1536), batch=8) -> tuple[list[dict], list[str]]:
    from seqlab.ops import linear_scan

    rows, peers = [], _accelerated_scans()
    missing = list(peers[1])
    for D in widths:
        for L in lengths:
            shape = dict(B=batch, L=L, D=D)
            g = torch.Generator(device=DEVICE).manual_seed(L + D)
            a = (torch.rand(batch, L, D, device=DEVICE, generator=g) * 0.5 + 0.5).requires_grad_(True)
            x = torch.randn(batch, L, D, device=DEVICE, generator=g, requires_grad=True)
            gh = torch.randn(batch, L, D, device=DEVICE, generator=g)
            h = linear_scan(a, x, mode="triton")
            ref = linear_scan(a.detach().double(), x.detach().double(), mode="blocked")
            err = {"h": relative_errors({"h": h}, {"h": ref})["h"]}
            del ref
            fwd = scan_work("forward", batch, L, D)
            rows.append(make_row("scan", "linear_scan", "op", "forward", shape, "ieee",
                                 cuda_ms(lambda: linear_scan(a, x, mode="triton")), fwd, peaks, error_vs_float64=err))
            with torch.no_grad(), recorded_launches() as launches:
                linear_scan(a, x, mode="triton")
            rows += kernel_rows("scan", launches, "forward", shape, "ieee", peaks, total_work=fwd)
            bwd = scan_work("backward", batch, L, D)
            h = linear_scan(a, x, mode="triton")
            with recorded_launches() as launches:
                torch.autograd.grad(h, (a, x), gh, retain_graph=True)
            rows += kernel_rows("scan", launches, "backward", shape, "ieee", peaks, total_work=bwd)
            rows.append(make_row("scan", "linear_scan", "op", "backward", shape, "ieee",
                                 cuda_ms(lambda: torch.autograd.grad(h, (a, x), gh, retain_graph=True)), bwd, peaks))
            del h
            at, xt = (t.detach().transpose(1, 2).contiguous() for t in (a, x))     # the peers' (B, D, L)
            for name, scan in peers[0].items():
                try:
                    rows.append(make_row("scan", name, "peer", "forward", shape, "ieee", cuda_ms(lambda: scan(at, xt)),
                                         fwd, peaks, note="its own (B, D, L) layout"))
                except Exception as err:      # e.g. a length its kernel does not take
                    missing.append(f"{name} at {shape} failed: {type(err).__name__}: {err}"[:300])
            del a, x, gh, at, xt
            torch.cuda.empty_cache()
    return rows, missing


def _fla_chunk_gla():
    try:
        from fla.ops.gla import chunk_gla
    except Exception as err:        # not installed, or built for another torch
        return None, (f"flash-linear-attention (its kernels: the wheel fla-core) is not installed or does not import "
                      f"({type(err).__name__}: {err})")[:300]
    return chunk_gla, None


def gateloop_precisions() -> tuple[str, ...]:
    """The ``tl.dot`` precisions ``gateloop`` can be asked for: all of :data:`PRECISIONS` when its signature
    has ``precision=``, else its one fixed precision, ``("ieee",)``."""
    from seqlab.ops import gateloop

    return PRECISIONS if "precision" in inspect.signature(gateloop).parameters else ("ieee",)


def _gateloop_inputs(B, H, L, d, seed):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, d, device=DEVICE, generator=g) for _ in range(3))
    log_a = -torch.rand(B, H, L, d, device=DEVICE, generator=g) * 0.1
    gy = torch.randn(B, H, L, d, device=DEVICE, generator=g)
    return q, k, v, log_a, gy


def _gradients(fn, q, k, v, log_a, gy) -> dict:
    """``y`` and the gradients of ``<y, gy>`` to ``q, k, v, log a`` (``a = exp(log a)`` for GateLoop)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, log_a)]
    y = fn(*leaves)
    torch.autograd.backward(y, gy.to(y.dtype))
    return {"y": y.detach(), **{n: t.grad for n, t in zip(("dq", "dk", "dv", "dlog_a"), leaves)}}


def gateloop_table(peaks, lengths=(1024, 16384), heads=8, d=64, batch=4, table="gateloop",
                   precisions=None) -> tuple[list[dict], list[str]]:
    from seqlab.ops import gateloop

    chunk = int(getattr(importlib.import_module("seqlab.ops.gateloop.triton"), "CHUNK", 64))   # steps a chunk
    chunk_gla, fla_missing = _fla_chunk_gla() if d >= 16 else (None, None)
    missing = [fla_missing] if fla_missing else []
    rows = []
    for L in lengths:
        shape = dict(B=batch, H=heads, L=L, dk=d, dv=d)
        q, k, v, log_a, gy = _gateloop_inputs(batch, heads, L, d, seed=L)
        reference, ref_mode = None, None
        for mode in ("chunked", "triton"):
            try:
                reference = _gradients(lambda *t: gateloop(t[0], t[1], t[2], t[3].exp(), mode=mode),
                                       *(t.double() for t in (q, k, v, log_a, gy)))
                ref_mode = mode
                break
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
        op_work = {p: gateloop_op_work(p, batch, heads, L, d, d) for p in ("forward", "forward+backward")}
        takes_precision = gateloop_precisions() != ("ieee",)
        for precision in precisions or gateloop_precisions():
            kw = {"precision": precision} if takes_precision else {}

            def ours(q_, k_, v_, la_):
                return gateloop(q_, k_, v_, la_.exp(), mode="triton", **kw)

            err = {"reference": "none: the float64 reference ran out of GPU memory"}
            if reference is not None:
                err = relative_errors(_gradients(ours, q, k, v, log_a, gy), reference)
                err["reference"] = f"gateloop(mode={ref_mode!r}) in float64"
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v, log_a)]
            a = leaves[3].exp()

            def fwd_bwd():
                for t in leaves:
                    t.grad = None
                torch.autograd.backward(gateloop(*leaves[:3], leaves[3].exp(), mode="triton", **kw), gy)

            rows.append(make_row(table, "gateloop", "op", "forward", shape, precision,
                                 cuda_ms(lambda: gateloop(*leaves[:3], a, mode="triton", **kw)), op_work["forward"],
                                 peaks, error_vs_float64=err))
            rows.append(make_row(table, "gateloop", "op", "forward+backward", shape, precision, cuda_ms(fwd_bwd),
                                 op_work["forward+backward"], peaks))
            with recorded_launches() as launches:
                y = gateloop(*leaves[:3], leaves[3].exp(), mode="triton", **kw)
            fwd_launches = list(launches)
            with recorded_launches() as launches:
                torch.autograd.backward(y, gy)

            def work_of(name, L=L):
                role = gateloop_role(name)
                return gateloop_work(role, batch, heads, L, d, d, chunk) if role and d >= 16 else None

            def whole(pass_, L=L):          # small heads run no chunks (the scan, with torch passes beside it)
                return gateloop_work(pass_, batch, heads, L, d, d, chunk) if d >= 16 else None

            rows += kernel_rows(table, fwd_launches, "forward", shape, precision, peaks, work_of, whole("forward"))
            rows += kernel_rows(table, launches, "backward", shape, precision, peaks, work_of, whole("backward"))
            del y, launches, fwd_launches, leaves, a
            torch.cuda.empty_cache()
        if chunk_gla is not None:
            rows += _fla_rows(chunk_gla, table, shape, q, k, v, log_a, gy, reference, ref_mode, op_work, peaks)
        del q, k, v, log_a, gy, reference
        torch.cuda.empty_cache()
    return rows, missing


def _fla_rows(chunk_gla, table, shape, q, k, v, log_a, gy, reference, ref_mode, op_work, peaks) -> list[dict]:
    """fla's ``chunk_gla`` at its float32 default (its ``tl.dot``s in TF32), in its ``(B, L, H, d)`` layout."""
    def fla(q_, k_, v_, la_):
        t = [x.transpose(1, 2) for x in (q_, k_, v_, la_)]
        return chunk_gla(*t, scale=1.0)[0].transpose(1, 2)

    err = {"reference": "none: the float64 reference ran out of GPU memory"}
    if reference is not None:
        err = relative_errors(_gradients(fla, q, k, v, log_a, gy), reference)
        err["reference"] = f"gateloop(mode={ref_mode!r}) in float64"
    leaves = [t.transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v, log_a)]
    gyt = gy.transpose(1, 2).contiguous()

    def fwd_bwd():
        for t in leaves:
            t.grad = None
        torch.autograd.backward(chunk_gla(*leaves, scale=1.0)[0], gyt)

    note = "flash-linear-attention chunk_gla, float32 inputs: its tl.dot default, TF32"
    rows = [make_row(table, "fla.chunk_gla", "peer", "forward", shape, "tf32",
                     cuda_ms(lambda: chunk_gla(*leaves, scale=1.0)), op_work["forward"], peaks,
                     error_vs_float64=err, note=note),
            make_row(table, "fla.chunk_gla", "peer", "forward+backward", shape, "tf32", cuda_ms(fwd_bwd),
                     op_work["forward+backward"], peaks, note=note)]
    with recorded_launches() as launches:
        o = chunk_gla(*leaves, scale=1.0)[0]
    fwd = list(launches)
    with recorded_launches() as launches:
        torch.autograd.backward(o, gyt)
    rows += kernel_rows(table, fwd, "forward", shape, "tf32", peaks, prefix="fla.")
    rows += kernel_rows(table, launches, "backward", shape, "tf32", peaks, prefix="fla.")
    return rows


def paper_table(peaks) -> tuple[list[dict], list[str]]:
    """The paper's setting (App. C): B = 4, 64 heads of dk = dv = 1, L = 16384; its kernels timed alone too."""
    return gateloop_table(peaks, lengths=(16384,), heads=64, d=1, batch=4, table="paper", precisions=("ieee",))


def decay_table(peaks, lengths=(1024, 4096, 16384)) -> tuple[list[dict], list[str]]:
    from seqlab.ops import decay_attention

    rows = []
    for L in lengths:
        shape = dict(B=1, H=4, L=L, dk=64, dv=64)
        q, k, v = (torch.randn(1, 4, L, 64, device=DEVICE, requires_grad=True) for _ in range(3))
        ld = torch.rand(1, 4, L, 1, device=DEVICE) * 0.1
        gy = torch.randn(1, 4, L, 64, device=DEVICE)
        for name, fn in (("additive, non-causal (1 scan, eq. 8)",
                          lambda: decay_attention(q, k, v, decay="additive", causal=False)),
                         ("multiplicative, non-causal (2 scans)",
                          lambda: decay_attention(q, k, v, decay="multiplicative", log_decay=ld, causal=False))):
            rows.append(make_row("decay", name, "op", "forward", shape, "ieee", cuda_ms(fn)))
            rows.append(make_row("decay", name, "op", "forward+backward", shape, "ieee",
                                 cuda_ms(lambda fn=fn: torch.autograd.grad(fn(), (q, k, v), gy))))
    return rows, []


TABLES = {"scan": scan_table, "gateloop": gateloop_table, "paper": paper_table, "decay": decay_table}


# --- the record ------------------------------------------------------------------------------------------------

def _version(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


def software() -> dict:
    import platform

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": _version("triton"), "flash-linear-attention": _version("flash-linear-attention"),
            "fla-core": _version("fla-core"), "accelerated-scan": _version("accelerated-scan"),
            "seqlab_commit": commit.stdout.strip() if commit.returncode == 0 else None}


def gpu_description(props) -> dict:
    found = gpu_peaks(props.name)
    return {"name": props.name, "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count, "peaks": found[1] if found else None,
            "bandwidth_from_clock": peak_bandwidth(props) if getattr(props, "memory_bus_width", 0) else None,
            "peaks_from": f"PEAKS[{found[0]!r}] in benchmarks/gpu.py" if found else
            f"unknown GPU {props.name!r}: not in benchmarks/gpu.py's PEAKS, no shares of the peak"}


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        rate = f"{r['GBps']:8.0f} GB/s {r['TFLOPs']:7.2f} TFLOP/s" if "GBps" in r else " " * 29
        share = (f"  {100 * r['share_of_peak_bandwidth']:5.1f}% bw {100 * r['share_of_peak_flops']:5.1f}% flops"
                 if "share_of_peak_bandwidth" in r else "")
        err = r.get("error_vs_float64")
        err = "  err " + " ".join(f"{k} {v:.1e}" for k, v in err.items() if isinstance(v, float)) if err else ""
        print(f"{r['table']:<8} {r['what']:<11} {r['name'][:36]:<36} {r['pass']:<16} {r['precision']:<6} {shape:<30} "
              f"{r['ms']:9.3f} ms {rate}{share}{err}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", nargs="+", choices=sorted(TABLES), default=list(TABLES))
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of the record (default benchmarks/results)")
    p.add_argument("--no-write", action="store_true", help="print the rows, write no record")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA GPU here (torch.cuda.is_available() is False): it times the CUDA kernels "
              "and writes nothing elsewhere. The CPU timings are benchmarks/scan.py, gateloop.py, decay.py.",
              file=sys.stderr)
        return 2
    from seqlab.kernels import interpreted

    if interpreted():
        print("benchmarks/gpu.py: TRITON_INTERPRET=1 is set: the kernels would run in the CPU interpreter; unset it",
              file=sys.stderr)
        return 2
    gpu = gpu_description(torch.cuda.get_device_properties(0))
    record = {"schema": SCHEMA, "date": datetime.date.today().isoformat(), "gpu": gpu, "software": software(),
              "timing": "median of calls between CUDA events, L2 flushed before each, after one warm-up (cuda_ms)",
              "missing": [], "failures": [], "rows": [], "targets": []}
    print(f"{gpu['name']} (sm_{gpu['capability'].replace('.', '')}, {gpu['multiprocessors']} SMs); "
          + (f"peaks {gpu['peaks']['bandwidth'] / 1e9:.0f} GB/s, fp32 {gpu['peaks']['fp32'] / 1e12:.1f} TFLOP/s"
             if gpu["peaks"] else gpu["peaks_from"]) + f"; {record['software']}", flush=True)
    for name in args.tables:
        try:
            rows, missing = TABLES[name](gpu["peaks"])
        except Exception as err:        # one table's failure is recorded, the others still run
            record["failures"].append(f"{name}: {type(err).__name__}: {err}"[:2000])
            print(f"FAILED {name}: {type(err).__name__}: {err}", flush=True)
            continue
        print_rows(rows)
        for line in missing:
            print(f"missing: {line}", flush=True)
        record["rows"] += rows
        record["missing"] += missing
    record["targets"] = targets(record["rows"])
    for t in record["targets"]:
        value = "unknown" if t["value"] is None else f"{t['value']:.3g}"
        verdict = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        print(f"target: {t['target']} = {value} (limit {t['limit']}): {verdict}"
              + (f"; {t['note']}" if "note" in t else ""))
    try:
        validate_record(record)
    except ValueError as err:           # the measurements are kept, the defect said
        record["failures"].append(str(err))
        print(f"FAILED: {err}", flush=True)
    if not args.no_write:
        path = record_path(gpu["name"], record["date"], args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"written: {path}")
    return 1 if record["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
