"""TrainConfig: one vocabulary for a run's settings, read and written by fit, the command line, its TOML files and
the checkpoints (a config round-trips through each)."""
import dataclasses
import shutil

import pytest
import torch
from helpers import TESTS

from seqlab import models, tasks, train
from seqlab.__main__ import TRAIN_FLAGS, TRAIN_OPTIONS, parse_args, train_config
from seqlab.train.config import TrainConfig

TASK = dict(min_len=2, max_len=4, train_size=40, test_size=16, autoregressive_n=4)
CFG = TrainConfig(steps=6, batch_size=8, lr=2e-3, seed=3, weight_decay=0.02, warmup=2, clip=0.5, final_lr_ratio=0.2,
                  betas=(0.8, 0.9), eval_every=3, checkpoint_every=2, threads=1, progress=False)


def test_every_train_flag_is_a_field():
    assert set(TRAIN_FLAGS) <= set(TrainConfig.fields()), sorted(set(TRAIN_FLAGS) - set(TrainConfig.fields()))
    args = vars(parse_args(["train"]))
    options = set(args) - {"command", "func", "config_file", "file_config", "file_task_config"}
    assert options == set(TRAIN_FLAGS) | set(TRAIN_OPTIONS)
    assert {k: args[k] for k in TRAIN_FLAGS} == {k: TrainConfig.defaults()[k] for k in TRAIN_FLAGS}


def test_the_command_line_wins_over_the_file_and_the_file_over_the_defaults(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("steps = 40\nlr = 0.01\nresume = true\ncheckpoint = 'a.pt'\n")
    args = parse_args(["train", "--config-file", str(path), "--lr", "0.002", "--seed", "4"])
    assert (args.steps, args.lr, args.seed, args.resume, args.batch_size) == (40, 0.002, 4, True, 64)


def test_a_config_round_trips_through_a_toml_file_and_the_command_line(tmp_path):
    fields = ("steps", "batch_size", "lr", "seed", "weight_decay", "warmup", "clip", "final_lr_ratio", "eval_every",
              "checkpoint_every", "threads")
    lines = [f"{k} = {getattr(CFG, k)!r}" for k in fields] + ["betas = [0.8, 0.9]", 'model = "gateloop"',
                                                               'task = "copying"', "[config]", "d_model = 8"]
    path = tmp_path / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    args = parse_args(["train", "--config-file", str(path), "--no-progress"])
    got = train_config(args, {"d_model": 8}, {}, "auto")
    assert {k: getattr(got, k) for k in (*fields, "betas")} == {k: getattr(CFG, k) for k in (*fields, "betas")}
    assert (got.model, got.model_config, got.task) == ("gateloop", {"d_model": 8}, "copying")


def test_a_config_round_trips_through_a_checkpoint(tmp_path):
    task = tasks.copying(**TASK)
    torch.manual_seed(0)
    model = models.build("gateloop", vocab_size=task.vocab_size, d_model=8, n_layers=1)
    train.fit(model, task, CFG, checkpoint=tmp_path / "run.pt")
    back = TrainConfig.from_run(train.load_checkpoint(tmp_path / "run.pt")["run"])
    assert back.run_record() == CFG.run_record()
    assert back.model == "gateloop" and back.model_config["d_model"] == 8 and back.task == "copying"


def test_keywords_build_a_config_and_replace_its_fields(tmp_path):
    task = tasks.copying(**TASK)

    def run(*args, **kw):
        torch.manual_seed(0)
        model = models.build("gateloop", vocab_size=task.vocab_size, d_model=8, n_layers=1)
        return train.fit(model, task, *args, **kw).train_loss()

    assert run(CFG) == run(**{f.name: getattr(CFG, f.name) for f in dataclasses.fields(CFG)})
    assert run(CFG, lr=1e-2) == run(dataclasses.replace(CFG, lr=1e-2)) != run(CFG)
    with pytest.raises(TypeError, match=r"unexpected training setting\(s\) \['stesp'\]"):
        train.fit(None, task, stesp=3)
    with pytest.raises(ValueError, match=r"betas: expected two numbers in \[0, 1\)"):
        TrainConfig(betas=(0.9, 1.5))


OLD_CHECKPOINT = TESTS / "fixtures" / "checkpoint-36f14f4-step3.pt"
OLD_LOSSES = [3.376568, 3.372225, 3.352275, 3.367859, 3.353288, 3.31909]    # that run's six steps, then


def test_a_checkpoint_written_before_trainconfig_loads_and_resumes(tmp_path):
    """A periodic save written by seqlab 36f14f4 (before TrainConfig): GateLoop (d_model 8) on copying, seed 3,
    6 steps of batch 8 at lr 2e-3, saved at step 3. Read back as a TrainConfig and resumed, it ends as a run
    made now from scratch and as that run did."""
    path = tmp_path / "run.pt"
    shutil.copy(OLD_CHECKPOINT, path)
    back = TrainConfig.from_run(train.load_checkpoint(path)["run"])
    assert (back.steps, back.batch_size, back.lr, back.seed, back.model) == (6, 8, 2e-3, 3, "gateloop")
    task = tasks.copying(**TASK)

    def model():
        torch.manual_seed(0)
        return models.build("gateloop", vocab_size=task.vocab_size, d_model=8, n_layers=1)

    resumed = train.fit(model(), task, back, checkpoint=path, resume=True, eval_every=3, progress=False)
    fresh = train.fit(model(), task, steps=6, batch_size=8, lr=2e-3, seed=3, eval_every=3, progress=False)
    # equal up to float rounding, not bit for bit: since the save, a language model's head runs on the labelled
    # tokens alone (seqlab.train.loop.head_on_features), which sums the same loss in another order
    assert resumed.train_loss() == pytest.approx(fresh.train_loss(), rel=1e-6)
    assert resumed.train_loss() == pytest.approx(OLD_LOSSES, rel=1e-6)


def test_an_experiments_sizes_reach_its_runs_under_the_same_names(tmp_path):
    """An experiment's sizes use TrainConfig's names: what its checkpoints hold is what the sizes said."""
    from seqlab import experiments

    sizes = dict(seq_len=24, steps=4, d_model=8, n_layers=1, batch_size=8, lr=1e-2, weight_decay=0.02, warmup=1,
                 train_size=48, test_size=16, betas=(0.8, 0.9))
    experiments.run("gateloop-memory-horizon", **sizes, progress=False, checkpoint_dir=tmp_path)
    for path in sorted(tmp_path.glob("*.pt")):
        back = TrainConfig.from_run(train.load_checkpoint(path)["run"])
        assert {k: getattr(back, k) for k in ("steps", "batch_size", "lr", "weight_decay", "warmup", "betas")} == \
            {k: sizes[k] for k in ("steps", "batch_size", "lr", "weight_decay", "warmup", "betas")}


def test_a_profiles_sizes_become_a_config_in_one_place():
    """``from_sizes`` keeps the sizes that are fields (None: the default), leaves a model's or a task's keys out and
    lets keywords win."""
    sizes = dict(steps=5, batch_size=4, lr=2e-3, warmup=None, betas=[0.8, 0.9], d_model=8, seq_len=16,
                 task_config={"min_len": 2})
    cfg = TrainConfig.from_sizes(sizes, seed=3, lr=1e-2)
    assert (cfg.steps, cfg.batch_size, cfg.lr, cfg.seed, cfg.warmup, cfg.betas) == (5, 4, 1e-2, 3, None, (0.8, 0.9))
    assert cfg.task_config == {"min_len": 2}
    with pytest.raises(TypeError, match=r"unexpected training setting\(s\) \['stesp'\]"):
        TrainConfig.from_sizes(sizes, stesp=3)


def test_every_experiment_reaches_fit_through_a_trainconfig():
    """``fit(model, task, cfg)``: no experiment spells a run's settings as keywords of ``fit``."""
    import ast
    import pathlib

    import seqlab.experiments

    for path in sorted(pathlib.Path(seqlab.experiments.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "fit":
                keywords = {k.arg for k in node.keywords}
                assert len(node.args) == 3 and keywords <= {"callbacks"}, f"{path.name}:{node.lineno}"
