"""Every Triton kernel fits in registers on a real GPU: compiled for sm_80 (A100) and sm_90 (H100) at the
blocks ``auto`` launches for head sizes 1, 16, 64 and 128 (for GateLoop: every configuration the default path may
launch or autotuning may pick, at every precision of its products, real and complex, and the sub-chunk kernels at
every precision, real and complex), ``ptxas -v`` reports 0 bytes of spill stores and loads, with the locked Triton
and with Triton 3.6. No GPU is needed: Triton compiles ahead of time (``seqlab.kernels.aot.ptxas_usage``), all
kernels in one process.

**The record.** A configuration's answer changes only with its kernel's source (the ``@triton.jit`` helpers it
calls and the constants it reads included), its launch, the architecture or the Triton version, so the answers
are kept in ``triton_spills_record.json`` beside this file, keyed by a hash of exactly those
(``seqlab.kernels.aot.job_key``), and only configurations whose key the record lacks are compiled
(``usage_with_record``); every assertion below reads recorded and fresh answers alike. What happens to a missing
key is set by ``SEQLAB_SPILL_RECORD``:

- ``write`` (the default outside CI): compile it and write it into the record, to be committed;
- ``readonly`` (the default where ``CI`` is set): compile it, leave the file alone, and warn which
  configurations were missing (``tests/ops/test_triton_spill_record.py`` then fails until the record is committed);
- ``strict``: compile nothing, fail naming the missing configurations;
- ``rebuild``: compile every configuration again and rewrite the record.

Refresh the record after changing a kernel or a launch configuration (seconds to minutes: only what changed):

    SEQLAB_SPILL_RECORD=write python3 workbench.py test tests/ops/test_triton_spills.py -n 1

and commit ``tests/ops/triton_spills_record.json``. ``test_the_record_agrees_with_a_fresh_compile`` compiles one
recorded configuration each run, so a record that no longer matches the compiler is caught.
"""
import importlib
import itertools
import re
from pathlib import Path

import pytest

from seqlab.kernels import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

HEAD_SIZES = (1, 16, 64, 128)
CAPABILITIES = (80, 90)
RECORD = Path(__file__).with_name("triton_spills_record.json")
REFRESH = "python3 workbench.py test tests/ops/test_triton_spills.py -n 1"


def spill_jobs():
    """Every configuration the kernels may launch, for sm_80 and sm_90, as ``ptxas_usage`` jobs."""
    gl = importlib.import_module("seqlab.ops.gateloop.triton")
    scan = importlib.import_module("seqlab.ops.scan.triton")
    rel = importlib.import_module("seqlab.ops.relation.triton")
    configs = []
    for d in HEAD_SIZES:
        DOT = gl.gateloop_blocks(d, d)[2]
        # every configuration the default path (chunks of 16, or of 64 with every configuration autotuning may
        # pick where TENSOR_CORE_CHUNKS is on) may launch: real inputs and transitions (real planes only), complex
        # inputs with real positive transitions (no phasors), complex transitions, each at every precision (the
        # elementwise path, DOT=False, takes PREC too and may launch with any of them)
        kinds = ((False, False), (False, True), (True, True))
        for (phase, cplx), prec in itertools.product(kinds, gl.PRECISIONS):
            C = gl.gateloop_chunk(d, d, prec, cplx)
            for k in gl.KERNELS:
                consts = dict(C=C, DOT=DOT, PHASE=phase, CPLX=cplx)
                if k != "chunk_attention_kernel":           # the one without a product, and without PREC
                    consts["PREC"] = prec
                for config in gl.gateloop_configs(k, d, d, prec, cplx):
                    blocks = {b: v for b, v in config.items() if b != "num_warps"}
                    configs.append(("seqlab.ops.gateloop.triton", k, {**consts, **blocks}, config["num_warps"]))
    # chunks of 64 cut into sub-chunks of 16 (on where SUBCHUNKS is): tiles of 16 at every head size of 16 and more,
    # at every precision, real and complex, each kernel at the one configuration it launches with, and the backward's
    # chunk_dqk_kernel on the sub-chunks (chunks of 16, tiles of 16, its warps) at the same precisions and kinds
    for phase, cplx in ((False, False), (False, True), (True, True)):
        for prec in gl.PRECISIONS:
            for k in gl.SUBCHUNK_KERNELS:
                consts = dict(C=gl.CHUNK_TENSOR_CORES, S=gl.SUBCHUNK, DOT=True, PHASE=phase, CPLX=cplx, PREC=prec)
                for config in gl.gateloop_configs(k, 16, 16, prec, cplx):
                    blocks = {b: v for b, v in config.items() if b != "num_warps"}
                    warps = (gl.subchunk_attention_warps(prec, phase) if k == "subchunk_attention_kernel"
                             else config["num_warps"])
                    configs.append(("seqlab.ops.gateloop.triton", k, {**consts, **blocks}, warps))
            dqk = dict(gl.gateloop_configs("chunk_dqk_kernel", 16, 16, "ieee", False)[0])
            dqk.pop("num_warps")
            configs.append(("seqlab.ops.gateloop.triton", "chunk_dqk_kernel",
                            dict(C=gl.SUBCHUNK, DOT=True, PHASE=phase, CPLX=cplx, PREC=prec, **dqk),
                            gl.subchunk_dqk_warps(prec, cplx)))
    # the scan's widest branch (complex a and x, an initial state) at the tiles its launch plan picks: every width
    # of channels (B * D / BD programs fill the GPU) with its 1024-element tile, a warp per 128 elements, so a thread
    # holds 4 elements of each plane at every tile; reduce-then-scan (B = 1) adds the chunk kernel
    for B, D in ((8, 256), (16, 256), (32, 256), (64, 256), (1, 256)):
        plan = scan.launch_plan(B, 16384, D)
        tile = dict(BT=plan["BT"], BD=plan["BD"], COMPLEX_A=True, COMPLEX_X=True, STATE_FP64=False, REVERSE=False)
        kernels = ([("linear_scan_chunk_kernel", dict(GRAD=True))] if plan["chunks"] > 1 else
                   [("linear_scan_fwd_kernel", dict(HAS_H0=True)),
                    ("linear_scan_bwd_kernel", dict(HAS_H0=True, HAS_C0=True))])
        configs += [("seqlab.ops.scan.triton", k, {**tile, **c}, plan["num_warps"]) for k, c in kernels]
    # the relation op's log-cumsum-exp at every width of features its launch plan may pick, 8 to 128 (a batch of
    # 1024 rows keeps BH = H; smaller ones narrow BH to one of these), with its 2048-element tile and 4 warps: the
    # most elements a thread holds (shorter sequences take shorter tiles with fewer warps, never more a thread)
    for i in range((rel.MAX_BLOCK_H // rel.MIN_BLOCK_H).bit_length()):
        plan = rel.launch_plan(1024, 16384, rel.MIN_BLOCK_H << i)
        configs += [("seqlab.ops.relation.triton", k, dict(BT=plan["BT"], BH=plan["BH"], STATE_FP64=False),
                     plan["num_warps"]) for k in ("logcumsumexp_fwd_kernel", "logcumsumexp_bwd_kernel")]
    unique = {(m, k, tuple(sorted(c.items())), w): (m, k, c, w) for m, k, c, w in configs}.values()
    return [dict(module=m, kernel=k, constexprs=c, capability=cap, dtype="fp32", num_warps=w)
            for m, k, c, w in unique for cap in CAPABILITIES]


@pytest.fixture(scope="module")
def jobs():
    return spill_jobs()


@pytest.fixture(scope="module")
def digests(jobs):
    """Every kernel's source hash, computed once for both Tritons' keys (``seqlab.kernels.aot.kernel_digests``)."""
    from seqlab.kernels.aot import kernel_digests

    return kernel_digests((j["module"], j["kernel"]) for j in jobs)


@pytest.fixture(scope="module")
def report(jobs, digests):
    """``ptxas -v`` and the Triton IR of every job, from the record or compiled where it lacks them (each compile
    takes ~1.3 s)."""
    from seqlab.kernels.aot import usage_with_record

    return usage_with_record(jobs, RECORD, refresh=REFRESH, digests=digests)


@pytest.fixture(scope="module")
def report_triton36(jobs, digests):
    """The same jobs compiled by Triton 3.6.0 (what offline GPU nodes often run: the kernels must compile on
    both), installed from its hashed pin (``requirements-triton36.lock``) into ``build/`` only if the record
    lacks a configuration."""
    from seqlab.kernels.aot import usage_with_record

    return usage_with_record(jobs, RECORD, triton_version="3.6.0", refresh=REFRESH, digests=digests)


def test_every_kernel_compiles_without_spills(report):
    _assert_no_spills(report)


def test_every_kernel_compiles_without_spills_on_triton_3_6(report_triton36):
    assert {r["triton"] for r in report_triton36} == {"3.6.0"}
    _assert_no_spills(report_triton36)


def test_the_record_agrees_with_a_fresh_compile(report):
    """One recorded configuration (the relation op's forward kernel for sm_90, a compile of a few seconds)
    compiled again by the installed Triton gives what the record says: a record that no longer matches the compiler
    (another ptxas, a change the key misses) fails here. Rebuild it with ``SEQLAB_SPILL_RECORD=rebuild`` and the
    command in the module docstring."""
    from seqlab.kernels.aot import ptxas_usage

    recorded = next(r for r in report if r["kernel"] == "logcumsumexp_fwd_kernel" and r["capability"] == 90)
    job = {k: recorded[k] for k in ("module", "kernel", "constexprs", "capability", "dtype", "num_warps")}
    (fresh,) = ptxas_usage([job])
    measured = ("registers", "spill_stores", "spill_loads", "dots", "triton")
    assert {k: fresh[k] for k in measured} == {k: recorded[k] for k in measured}, recorded["key"]


def _assert_no_spills(report):
    kernels = {r["kernel"] for r in report}
    assert {"chunk_dqk_kernel", "linear_scan_bwd_kernel", "logcumsumexp_bwd_kernel"} <= kernels
    missing = [r for r in report if r["spill_stores"] is None]
    assert not missing, f"no ptxas report for {[(r['kernel'], r['capability']) for r in missing]}"
    spills = [f"{r['kernel']} sm_{r['capability']} {r['constexprs']}: {r['registers']} registers, "
              f"{r['spill_stores']} B spill stores, {r['spill_loads']} B spill loads"
              for r in report if r["spill_stores"] or r["spill_loads"]]
    assert not spills, "kernels that spill:\n" + "\n".join(spills)


def _precision(dot: str) -> str:
    """The precision of one ``tt.dot`` line of Triton IR: bf16 operands, or its ``inputPrecision`` (IEEE, the
    default, is not printed; any other shows as ``inputPrecision = tf32`` etc.)."""
    if "xbf16>" in dot.split("->")[0]:
        return "bf16"
    found = re.search(r"inputPrecision = (\w+)", dot)
    return found.group(1) if found else "ieee"


def test_every_product_has_the_precision_asked_for(report):
    """Every ``tt.dot`` in the Triton IR is one the kernel asks for, at the precision it asks for: the elementwise
    path of small GateLoop heads (``DOT=False``) holds none, since Triton's combiner turns a broadcast
    multiply-and-sum into a ``tt.dot``, which gave wrong gradients at sides of 1 on an H100 (Triton 3.6; this test
    would have caught it); GateLoop's products are at its ``PREC`` (``"ieee"`` by default: TF32 would break the
    float32 tolerances), every other kernel's in full (IEEE) precision."""
    report = [r for r in report if r["capability"] == 90]
    made = [f"{r['kernel']} {r['constexprs']}: {r['dots']}" for r in report
            if r["constexprs"].get("DOT") is False and r["dots"]]
    assert not made, "tt.dot in the elementwise path:\n" + "\n".join(made)
    asked = {r["constexprs"].get("PREC", "ieee") for r in report if r["dots"]}
    assert asked == {"ieee", "tf32x3", "tf32", "bf16"}, f"products compiled only at {asked}"
    wrong = [f"{r['kernel']} {r['constexprs']}: {d}" for r in report for d in r["dots"]
             if _precision(d) != r["constexprs"].get("PREC", "ieee")]
    assert not wrong, "tt.dot not at the precision asked for:\n" + "\n".join(wrong)


def test_real_inputs_take_one_product_where_complex_take_four(report):
    """GateLoop's real path (real ``q, k, v, a``: ``CPLX=False``) holds a quarter of the complex path's ``tt.dot``s
    and reads no imaginary planes: one real product where complex arithmetic needs four."""
    dots = {(r["kernel"], r["constexprs"]["BK"], r["constexprs"]["CPLX"]): len(r["dots"]) for r in report
            if r["module"] == "seqlab.ops.gateloop.triton" and r["constexprs"]["DOT"] and r["capability"] == 90
            and not r["constexprs"]["PHASE"] and r["constexprs"].get("PREC") == "ieee"}
    pairs = [(key[:2], n, dots[(*key[:2], True)]) for key, n in dots.items() if not key[2]]
    assert pairs and any(n for _, n, _ in pairs)
    wrong = [f"{kernel}: {n} real, {c} complex" for kernel, n, c in pairs if 4 * n != c]
    assert not wrong, "real path not a quarter of the complex products:\n" + "\n".join(wrong)
