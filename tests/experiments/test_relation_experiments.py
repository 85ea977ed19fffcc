"""Relation experiments (tiny sizes), their figures, and the readout read-outs of the BiRN heat map."""
import pytest
import torch

from helpers import check
from seqlab import experiments, readout, models
from seqlab.experiments import relation as R
from seqlab.viz import relation as rviz

TINY = dict(d_model=16, n_layers=1, batch_size=8, lr=3e-3, train_size=64, test_size=16)


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQLAB_DATA", str(tmp_path))


def test_registered():
    names = experiments.names()
    for name in ("relation-copying", "relation-copying-ablation", "relation-copying-scaling", "relation-birn-digits",
                 "relation-text"):
        assert name in names


def test_copying_pair_and_ablation_share_the_base_run():
    out = experiments.run("relation-copying", length=3, steps=4, eval_every=2, progress=False, **TINY)
    assert set(out["accuracy"]) == {"causalrn", "linear-causalrn"}
    assert all(0.0 <= a <= 1.0 for a in out["accuracy"].values())
    abl = R.copying_ablation(groups=["pre-norm", "activation"], length=3, steps=3, eval_every=3, **TINY)
    assert list(abl["final"]["pre-norm"]) == ["exact (proposed)", "approx", "none"]
    assert abl["groups"]["pre-norm"]["exact (proposed)"] is abl["groups"]["activation"]["exp (proposed)"]
    fig = rviz.ablation_figure(abl)
    assert len(fig.data) == 6          # 3 + 3 variants, test curves
    colours = [t.line.color for t in fig.data]
    assert colours[0] == colours[3]                  # the proposed variant: one colour in both panels
    assert len(set(colours)) == 5                    # every other variant a colour of its own
    assert fig.data[1].name == "pre-norm: approx"
    with pytest.raises(ValueError, match="groups"):
        R.copying_ablation(groups=["dropout"], **TINY)
    with pytest.raises(TypeError, match="unexpected keyword"):
        R.copying_pair(width=3)


def test_scaling_records_iterations_or_none():
    out = R.copying_scaling(names=("causalrn", "linear-causalrn"), lengths=(2,), steps=4, eval_every=2, **TINY)
    for name in ("causalrn", "linear-causalrn"):
        its = out["iterations"][name]
        assert len(its) == 1 and (its[0] is None or 1 <= its[0] <= 4)
    fig = rviz.iterations_figure(out)
    assert len(fig.data) >= 2


def test_birn_heatmap_is_the_cls_share_of_each_patch():
    out = R.birn_digits(steps=3, batch_size=8, d_model=16, n_layers=1, examples=3, progress=False)
    assert out["heatmaps"].shape == (3, 4, 4) and out["images"].shape == (3, 8, 8)
    model, task = out["model"], out["task"]
    tokens = task.tensors("test")["input_ids"][:3]
    # by hand from p, q of the last block (exp, approx pre-norm: p' = w LN(p), q' = w LN(q) + b)
    block = model.blocks[-1]
    p, q = readout.relation_pq(model, tokens, -1)
    ln = lambda t: torch.nn.functional.layer_norm(t, (t.shape[-1],))
    with torch.no_grad():
        p1 = ln(p) * block.act_weight
        q1 = ln(q) * block.act_weight + block.act_bias
        mass = torch.exp(p1[:, None, :, :] + q1[:, :, None, :]).sum(-1)       # (B, query j, key i)
        share = mass / mass.sum(-1, keepdim=True)
    check(out["heatmaps"], share[:, 1:, 0].reshape(3, 4, 4), 1e-5, "patch -> CLS share")
    from_cls = readout.birn_cls_heatmap(model, tokens, (4, 4), direction="from_cls")
    check(from_cls, share[:, 0, 1:].reshape(3, 4, 4), 1e-5, "CLS -> patch share")
    fig = rviz.cls_heatmap_figure(out["images"], out["heatmaps"], out["labels"])
    assert len(fig.data) == 6
    with pytest.raises(ValueError, match="grid"):
        readout.birn_cls_heatmap(model, tokens, (3, 3))
    lm = models.build("causalrn", vocab_size=10, d_model=8, n_layers=1)
    with pytest.raises(ValueError, match="CLS token"):
        readout.birn_cls_heatmap(lm, torch.randint(0, 10, (1, 4)), (2, 2))


def test_text_model_samples_through_the_stream():
    out = R.text_model(steps=2, batch_size=4, d_model=16, n_layers=1, seq_len=32, max_chars=5000, new_tokens=10,
                       progress=False)
    assert out["sample"].startswith("To be, or not ") and len(out["sample"]) == len("To be, or not ") + 10
    assert out["bits_per_char"] > 0
