"""benchmarks/gpu.py's logic without a GPU: the work formulas, the peak table, the record's schema, the launch
recorder (in Triton's interpreter) and its refusal without CUDA. No time is measured here."""
import importlib.util
import json
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO


@pytest.fixture(scope="module")
def gpu():
    spec = importlib.util.spec_from_file_location("gpu_benchmark_under_test", REPO / "benchmarks" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scan_moves_12_bytes_an_element_forward_and_20_backward_in_float32(gpu):
    B, L, D = 8, 16384, 256
    assert gpu.scan_work("forward", B, L, D).bytes == 12 * B * L * D
    assert gpu.scan_work("backward", B, L, D).bytes == 20 * B * L * D
    assert gpu.scan_work("forward", B, L, D, itemsize=2).bytes == 6 * B * L * D
    with pytest.raises(ValueError, match="pass_"):
        gpu.scan_work("sideways", B, L, D)


def test_gateloop_work_counts_the_tensors_each_kernel_reads_and_writes(gpu):
    """Each role's bytes from the shapes of the tensors it touches (float32), its FLOPs from its products."""
    B, H, L, K, V, C = 2, 3, 40, 16, 32, 16          # L not a whole number of chunks: T = 3
    N, T = B * H, 3
    step = {"q": N * L * K, "k": N * L * K, "log a": N * L * K, "v": N * L * V, "y": N * L * V}
    states, A = N * T * K * V, N * T * C * C
    expected_bytes = {
        "states": step["k"] + step["log a"] + step["v"] + states,
        "attention": step["q"] + step["k"] + step["log a"] + A,
        "output": step["q"] + step["log a"] + step["v"] + states + A + step["y"],
    }
    matmul = lambda m, k, n: 2 * m * k * n                     # noqa: E731  (FLOPs of an m x k by k x n product)
    expected_flops = {
        "states": N * matmul(K, L, V),                          # k~^T v summed over the steps
        "attention": N * matmul(L, K, C),                       # each step's q against its chunk's C keys
        "output": N * (matmul(L, K, V) + matmul(L, C, V)),      # q~ S_in + A v
    }
    for role in gpu.GATELOOP_FORWARD_ROLES:
        work = gpu.gateloop_work(role, B, H, L, K, V, C)
        assert (work.bytes, work.flops) == (4 * expected_bytes[role], expected_flops[role]), role
    whole = gpu.gateloop_work("forward", B, H, L, K, V, C)
    assert whole.bytes == 4 * sum(expected_bytes.values()) and whole.flops == sum(expected_flops.values())
    backward = gpu.gateloop_work("backward", B, H, L, K, V, C)
    assert backward.flops == 2 * whole.flops            # each product's two adjoint products
    with pytest.raises(ValueError, match="role"):
        gpu.gateloop_work("readout", B, H, L, K, V, C)
    op = gpu.gateloop_op_work("forward+backward", B, H, L, K, V)
    inputs = sum(step.values()) - step["y"]                  # q, k, log a, v; their gradients are as large
    assert op.bytes == 4 * ((inputs + step["y"]) + (inputs + step["y"] + inputs))   # forward; backward reads dy


def test_kernel_names_map_to_their_roles(gpu):
    names = {"chunk_states_kernel": "states", "chunk_attention_kernel": "attention", "chunk_output_kernel": "output",
             "chunk_adjoint_kernel": "adjoint", "chunk_dqk_kernel": "dqk", "chunk_dv_kernel": "dv",
             "linear_scan_fwd_kernel": None}
    assert {n: gpu.gateloop_role(n) for n in names} == names
    inner = SimpleNamespace(fn=SimpleNamespace(fn=test_kernel_names_map_to_their_roles))   # autotuner, jit, function
    assert gpu.kernel_name(inner) == "test_kernel_names_map_to_their_roles"


def test_the_peak_table_knows_each_gpu_by_its_torch_name(gpu):
    for name, key in (("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
                      ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe")):
        assert gpu.gpu_peaks(name)[0] == key, name
    assert gpu.gpu_peaks("NVIDIA H100 PCIe")[1]["bandwidth"] < gpu.gpu_peaks("NVIDIA H100 80GB HBM3")[1]["bandwidth"]
    assert gpu.gpu_peaks("NVIDIA GeForce RTX 4090") is None
    peaks = gpu.gpu_peaks("NVIDIA H100 80GB HBM3")[1]
    assert gpu.peak_flops(peaks, "ieee") == peaks["fp32"] and gpu.peak_flops(peaks, "tf32x3") == peaks["tf32"] / 3
    assert set(gpu.PEAK_OF_PRECISION) == set(gpu.PRECISIONS)


def _record(gpu, peaks, rows):
    return {"schema": gpu.SCHEMA, "date": "2026-11-26", "gpu": {"name": "NVIDIA H100 80GB HBM3", "peaks": peaks},
            "software": {"torch": "2.11.0", "triton": "3.6.0"}, "missing": [], "failures": [], "rows": rows,
            "targets": gpu.targets(rows)}


def test_a_row_carries_its_rates_and_shares_and_the_record_follows_the_schema(gpu, tmp_path):
    peaks = gpu.gpu_peaks("NVIDIA H100 80GB HBM3")[1]
    work = gpu.scan_work("forward", 8, 16384, 1536)
    row = gpu.make_row("scan", "linear_scan", "op", "forward", dict(B=8, L=16384, D=1536), "ieee", 0.5, work, peaks,
                       error_vs_float64={"h": 1e-7})
    assert row["GBps"] == pytest.approx(work.bytes / 0.5e-3 / 1e9)
    assert row["share_of_peak_bandwidth"] == pytest.approx(work.bytes / 0.5e-3 / 3.35e12)
    assert row["share_of_peak_flops"] == pytest.approx(work.flops / 0.5e-3 / 67e12)
    unknown = gpu.make_row("scan", "linear_scan", "op", "forward", {}, "ieee", 0.5, work, None)
    assert "GBps" in unknown and "share_of_peak_bandwidth" not in unknown       # an unknown GPU: rates, no share
    record = _record(gpu, peaks, [row, unknown])
    gpu.validate_record(record)
    path = gpu.record_path(record["gpu"]["name"], record["date"], tmp_path)
    assert path.name == "gpu-nvidia-h100-80gb-hbm3-2026-11-26.json"
    path.write_text(json.dumps(record))
    gpu.validate_record(json.loads(path.read_text()))
    for broken, field in ((dict(row, ms=0.0), "rows[0].ms"), (dict(row, what="guess"), "rows[0].what"),
                          (dict(row, speed=1), "rows[0]: unknown fields")):
        with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
            gpu.validate_record(_record(gpu, peaks, [broken]))
    with pytest.raises(ValueError, match="a share of the peak on a GPU whose peaks are unknown"):
        gpu.validate_record(_record(gpu, None, [row]))
    with pytest.raises(ValueError, match="date"):
        gpu.validate_record(dict(record, date="26/11/2026"))


def test_the_targets_are_read_off_the_rows(gpu):
    peaks = gpu.gpu_peaks("NVIDIA H100 80GB HBM3")[1]
    big, gl = dict(B=8, L=16384, D=1536), dict(B=4, H=8, L=1024, dk=64, dv=64)
    work = gpu.scan_work("forward", 8, 16384, 1536)
    at_60_percent = work.bytes / (0.6 * peaks["bandwidth"]) * 1e3          # ms
    rows = [gpu.make_row("scan", "linear_scan", "op", "forward", big, "ieee", at_60_percent * 1.01, work, peaks),
            gpu.make_row("scan", "accelerated_scan.warp", "peer", "forward", big, "ieee", at_60_percent, work, peaks),
            gpu.make_row("gateloop", "gateloop", "op", "forward", gl, "ieee", 3.0),
            gpu.make_row("gateloop", "gateloop", "op", "forward", gl, "tf32", 1.9),
            gpu.make_row("gateloop", "fla.chunk_gla", "peer", "forward", gl, "tf32", 1.0),
            gpu.make_row("gateloop", "gateloop", "op", "forward+backward", gl, "ieee", 2.4),
            gpu.make_row("gateloop", "fla.chunk_gla", "peer", "forward+backward", gl, "tf32", 1.0),
            gpu.make_row("paper", "gateloop", "op", "forward+backward", dict(B=4, H=64, L=16384), "ieee", 0.5)]
    found = {t["target"]: t for t in gpu.targets(rows)}
    share = found["scan forward, B=8 L=16384 D=1536: share of peak bandwidth"]
    assert share["value"] == pytest.approx(0.6 / 1.01) and share["met"] is False
    assert found["scan forward, B=8 L=16384 D=1536: time / accelerated_scan.warp's"]["met"] is False    # 1.01x slower
    forward = found["gateloop forward, L=1024: time / fla chunk_gla's"]
    assert forward["value"] == pytest.approx(1.9) and forward["met"] and "note" not in forward   # tf32 against tf32
    both = found["gateloop forward+backward, L=1024: time / fla chunk_gla's"]
    assert both["met"] and "not the same precision" in both["note"]                    # no tf32 row: ieee, said
    assert found["the paper's setting (B 4, 64 heads of 1, L 16384) forward + backward, ms"]["met"]
    unknown = gpu.make_row("scan", "linear_scan", "op", "forward", big, "ieee", 1.0, work, None)
    assert gpu.targets([unknown])[0]["met"] is None                                  # an unknown GPU: not measured


def test_gateloop_is_asked_for_every_precision_once_it_takes_one(gpu, monkeypatch):
    import seqlab.ops

    monkeypatch.setattr(seqlab.ops, "gateloop", lambda q, k, v, a, *, mode="auto": None)
    assert gpu.gateloop_precisions() == ("ieee",)
    monkeypatch.setattr(seqlab.ops, "gateloop", lambda q, k, v, a, *, mode="auto", precision="ieee": None)
    assert gpu.gateloop_precisions() == gpu.PRECISIONS


def test_launches_are_recorded_and_each_replays_alone(gpu):
    """In the interpreter: the scan's launches, forward and backward, are recorded with their arguments, and
    replaying the forward ones alone writes the op's output again into its buffer."""
    from seqlab.kernels import HAVE_TRITON
    from seqlab.ops import linear_scan

    if not HAVE_TRITON or torch.cuda.is_available():
        pytest.skip("needs Triton's CPU interpreter")
    a = (torch.rand(1, 5, 3) * 0.5 + 0.5).requires_grad_(True)
    x = torch.randn(1, 5, 3, requires_grad=True)
    with gpu.recorded_launches() as launches:
        h = linear_scan(a, x, mode="triton")
    forward = list(launches)
    assert forward and all(isinstance(launch.name, str) for launch in forward)
    with gpu.recorded_launches() as launches:
        torch.autograd.grad(h, (a, x), torch.ones_like(h))
    assert launches and {launch.name for launch in launches}.isdisjoint({""})
    out = [t for launch in forward for t in launch.args
           if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == h.untyped_storage().data_ptr()]
    assert out, "the op's output buffer is not among the recorded launches' arguments"
    expected = h.detach().clone()
    out[0].detach().fill_(float("nan"))
    for launch in forward:
        launch.replay()
    assert torch.equal(h.detach(), expected)
    with gpu.recorded_launches() as after:
        pass
    assert after == []                                   # the recorder is gone once the block ends


def test_without_cuda_it_refuses_with_a_clear_message(gpu, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpu.main(["--no-write"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU here" in err and "writes nothing" in err
