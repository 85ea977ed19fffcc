"""Every Triton kernel fits in registers on a real GPU: compiled for sm_80 (A100) and sm_90 (H100) at the
blocks ``auto`` launches for head sizes 1, 16, 64 and 128, ``ptxas -v`` reports 0 bytes of spill stores and
loads. No GPU is needed: Triton compiles ahead of time (``seqlab.kernels.aot.ptxas_usage``), all kernels in
one process."""
import importlib

import pytest

from seqlab.kernels import HAVE_TRITON

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

HEAD_SIZES = (1, 16, 64, 128)
CAPABILITIES = (80, 90)


def _jobs():
    gl = importlib.import_module("seqlab.ops.gateloop.triton")
    scan = importlib.import_module("seqlab.ops.scan.triton")
    rel = importlib.import_module("seqlab.ops.relation.triton")
    configs = []
    for d in HEAD_SIZES:
        BK, BV, DOT = gl.gateloop_blocks(d, d)
        for phase in (False, True):      # real positive transitions skip the phasors
            configs += [("seqlab.ops.gateloop.triton", k, dict(C=gl.CHUNK, BK=BK, BV=BV, DOT=DOT, PHASE=phase),
                         gl.gateloop_warps(k, DOT)) for k in gl.KERNELS]
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


def test_every_kernel_compiles_without_spills():
    from seqlab.kernels.aot import ptxas_usage

    report = ptxas_usage(_jobs())
    kernels = {r["kernel"] for r in report}
    assert {"chunk_dqk_kernel", "linear_scan_bwd_kernel", "logcumsumexp_bwd_kernel"} <= kernels
    missing = [r for r in report if r["spill_stores"] is None]
    assert not missing, f"no ptxas report for {[(r['kernel'], r['capability']) for r in missing]}"
    spills = [f"{r['kernel']} sm_{r['capability']} {r['constexprs']}: {r['registers']} registers, "
              f"{r['spill_stores']} B spill stores, {r['spill_loads']} B spill loads"
              for r in report if r["spill_stores"] or r["spill_loads"]]
    assert not spills, "kernels that spill:\n" + "\n".join(spills)


def test_no_kernel_multiplies_matrices_in_reduced_precision():
    """Every ``tt.dot`` in the Triton IR is one the kernel asks for, in full precision: the elementwise path of
    small GateLoop heads (``DOT=False``) holds none, since Triton's combiner turns a broadcast multiply-and-sum
    into a ``tt.dot``, which gave wrong gradients at sides of 1 on an H100 (Triton 3.6; this test would have caught
    it); and every ``tt.dot`` is in full (IEEE) precision: TF32 would break the float32 tolerances."""
    from seqlab.kernels.aot import ptxas_usage

    jobs = [j for j in _jobs() if j["capability"] == 90]
    report = ptxas_usage(jobs)
    made = [f"{r['kernel']} {r['constexprs']}: {r['dots']}" for r in report
            if r["constexprs"].get("DOT") is False and r["dots"]]
    assert not made, "tt.dot in the elementwise path:\n" + "\n".join(made)
    # IEEE is tt.dot's default precision and is not printed; any other shows as "inputPrecision = tf32" etc.
    low = [f"{r['kernel']} {r['constexprs']}: {d}" for r in report for d in r["dots"] if "inputPrecision" in d]
    assert not low, "tt.dot below full precision:\n" + "\n".join(low)
