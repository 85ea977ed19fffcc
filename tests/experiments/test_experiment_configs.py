"""configs/: the full profile's sizes, read by the experiments; experiments that checkpoint and resume; the
command line's --config-file and --checkpoint-dir."""
import json
from pathlib import Path

import pytest
from helpers import REPO, ctrl_c_at_step

from seqlab import experiments, train
from seqlab.__main__ import main
from seqlab.experiments import _common

CONFIGS = sorted((REPO / "configs").glob("*.toml"))


def test_every_paper_experiment_has_a_config_and_every_config_an_experiment():
    names = experiments.names()
    with_sizes = {n for n in names if n not in experiments.WITHOUT_CONFIG}
    assert {p.stem for p in CONFIGS} == with_sizes
    assert set(experiments.WITHOUT_CONFIG) <= set(names)
    for name in with_sizes:
        assert experiments.config_file(name).is_file()
        data = _common.read_config(experiments.config_file(name))
        assert data["experiment"] == name and data["paper"] and data["estimated_time"]
        assert "profile" in __import__("inspect").signature(experiments.get(name)).parameters


@pytest.mark.parametrize("name", [p.stem for p in CONFIGS])
def test_every_size_table_reads_its_full_sizes_from_the_config(name):
    tables = _common.TABLES[name]
    assert tables, f"{name} has a config but no Sizes table reads it"
    for table in tables:
        full = table["full"]
        assert set(full) - set(table.optional) == set(table.quick)    # optional keys: where a profile sets them
        assert full != table["quick"]
        # steps grow, or at least stay: the paper's runs are never shorter than the quick ones
        if "steps" in full:
            assert full["steps"] >= table.quick["steps"]


def _write(tmp_path, text: str, name="run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


QUICK = dict(a=1, threads=1, task_config={})


def test_file_sizes_name_what_is_wrong(tmp_path):
    ok = _write(tmp_path, 'experiment = "x"\n[sizes]\na = 2\ntask_config = { n = 3 }\n')
    assert _common.file_sizes(ok, "x", QUICK) == {"a": 2, "threads": None, "task_config": {"n": 3}}
    with pytest.raises(ValueError, match=r"is for experiment 'x', not 'y'"):
        _common.file_sizes(ok, "y", QUICK)
    with pytest.raises(ValueError, match=r"unknown keys \['b'\].*lacks \['a'\]"):
        _common.file_sizes(_write(tmp_path, "[sizes]\nb = 2\ntask_config = {}\n", "b.toml"), "x", QUICK)
    with pytest.raises(ValueError, match=r"has no \[sizes.digits\] table"):
        _common.file_sizes(ok, "x", QUICK, section="digits")
    with pytest.raises(ValueError, match="is not valid TOML"):
        _common.read_config(_write(tmp_path, "[sizes\n", "c.toml"))
    with pytest.raises(ValueError, match=r"unknown top-level keys \['stpes'\]"):
        _common.read_config(_write(tmp_path, "stpes = 3\n[sizes]\n", "d.toml"))
    with pytest.raises(ValueError, match="does not exist"):
        _common.read_config(tmp_path / "none.toml")
    with pytest.raises(ValueError, match="profile: expected one of"):
        _common.profile_sizes(_common.Sizes("x", QUICK), "medium-ish", {})


TINY_MH = dict(seq_len=24, steps=6, d_model=8, n_layers=1, batch_size=8, lr=1e-2, train_size=48, test_size=16,
               progress=False)


def test_a_config_file_is_a_profile(tmp_path):
    path = _write(tmp_path, 'experiment = "gateloop-memory-horizon"\n[sizes]\nseq_len = 24\nsteps = 3\nd_model = 8\n'
                  'n_layers = 1\nbatch_size = 8\nlr = 1e-2\nweight_decay = 0.0\ntrain_size = 48\ntest_size = 16\n')
    out = experiments.run("gateloop-memory-horizon", profile=str(path), progress=False)
    assert out["config"]["steps"] == 3 and out["config"]["warmup"] is None and out["config"]["weight_decay"] == 0.0
    assert out["histories"]["fixed"].steps == 3
    with pytest.raises(ValueError, match="takes no profile or config file"):
        experiments.run("fst-parameter-table", profile=str(path))


def test_an_interrupted_experiment_resumes_from_its_checkpoint_folder(tmp_path):
    whole = experiments.run("gateloop-memory-horizon", checkpoint_dir=str(tmp_path / "whole"), **TINY_MH)
    assert sorted(p.name for p in (tmp_path / "whole").iterdir()) == ["data_controlled-seed0.pt", "fixed-seed0.pt"]
    calls = []

    def ctrl_c_in_the_second_run(history, record):
        calls.append(record["step"]) if record["split"] == "train" else None
        if len(calls) == 6 + 3 and record["split"] == "train":            # the first run's 6 steps, then step 3 of the second
            raise KeyboardInterrupt

    with pytest.raises(train.TrainingInterrupted) as stop:
        experiments.run("gateloop-memory-horizon", checkpoint_dir=str(tmp_path / "cut"),
                        callbacks=[ctrl_c_in_the_second_run], **TINY_MH)
    assert stop.value.step == 3 and stop.value.checkpoint.endswith("fixed-seed0.pt")
    again = experiments.run("gateloop-memory-horizon", checkpoint_dir=str(tmp_path / "cut"), **TINY_MH)
    assert again["accuracy"] == whole["accuracy"]
    for variant in ("data_controlled", "fixed"):
        assert again["histories"][variant].train_loss() == whole["histories"][variant].train_loss()
    # a finished folder trains nothing: the same results come back from the files
    def no_training(history, record):
        raise AssertionError(f"trained again: {record}")

    assert experiments.run("gateloop-memory-horizon", checkpoint_dir=str(tmp_path / "cut"), callbacks=[no_training],
                           **TINY_MH)["accuracy"] == whole["accuracy"]


def test_a_run_stopped_by_a_callback_stays_stopped_on_resume(tmp_path):
    from seqlab.experiments.relation import train_copying
    from seqlab import tasks

    task = tasks.copying(min_len=3, max_len=3, train_size=64, test_size=16, autoregressive_n=0)
    from seqlab.train.config import TrainConfig

    run = TrainConfig(steps=40, batch_size=8, lr=1e-2, eval_every=2, checkpoint=str(tmp_path / "run.pt"), resume=True,
                      progress=False)
    _, first = train_copying("linear-causalrn", task, run, d_model=16, n_layers=1, stop_at=0.0)   # stops at once
    assert first.steps == 2
    _, again = train_copying("linear-causalrn", task, run, d_model=16, n_layers=1, stop_at=None)
    assert again.steps == 2 and again.final == first.final


def test_cli_experiment_with_a_config_file_and_a_checkpoint_folder(tmp_path, capsys):
    path = _write(tmp_path, 'experiment = "lightnet-copying"\npaper = "test"\n[sizes]\nd_model = 16\nn_layers = 1\n'
                  'n_heads = 2\nsteps = 3\nbatch_size = 8\nlr = 1e-2\nthreads = 1\n'
                  'task_config = { min_len = 3, max_len = 3, train_size = 64, test_size = 16, autoregressive_n = 4 }\n')
    args = ["experiment", "lightnet-copying", "progress=False", "--config-file", str(path),
            "--checkpoint-dir", str(tmp_path / "runs")]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["d_model"] == 16 and (tmp_path / "runs" / "copying-seed0.pt").exists()
    assert main(args) == 0 and json.loads(capsys.readouterr().out)["final"] == out["final"]
    assert main(["experiment", "lightnet-copying", "profile=quick", "--config-file", str(path)]) == 2
    assert "either --config-file or profile" in capsys.readouterr().err
    assert main(["experiment", "relation-copying", "--config-file", str(path)]) == 2
    assert "is for experiment 'lightnet-copying', not 'relation-copying'" in capsys.readouterr().err


def test_cli_experiment_ctrl_c_says_how_to_resume(tmp_path, capsys, monkeypatch):
    ctrl_c_at_step(monkeypatch, 2)
    sizes = ["seq_len=24", "steps=4", "d_model=8", "n_layers=1", "batch_size=8", "train_size=48", "test_size=16",
             "progress=False"]
    assert main(["experiment", "gateloop-memory-horizon", *sizes, "--checkpoint-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert f"stopped by SIGINT at step 2, saved to {tmp_path / 'data_controlled-seed0.pt'}" in err
    assert "run the same command again to resume" in err
    assert main(["experiment", "gateloop-memory-horizon", *sizes]) == 130
    assert "add --checkpoint-dir DIR" in capsys.readouterr().err


def test_cli_train_reads_a_config_file_and_the_command_line_wins(tmp_path, capsys):
    path = _write(tmp_path, 'model = "transformer"\ntask = "copying"\nsteps = 3\nbatch_size = 8\nlr = 1e-2\n'
                  'no_progress = true\nthreads = 1\njson = true\n[config]\nd_model = 16\nn_layers = 1\nn_heads = 2\n'
                  '[task_config]\nmin_len = 2\nmax_len = 4\ntrain_size = 64\ntest_size = 16\nautoregressive_n = 4\n')
    assert main(["train", "--config-file", str(path)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 3
    assert main(["train", "--config-file", str(path), "--steps", "2", "--config", "d_model=8"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 2
    from seqlab import models
    n8 = models.count_parameters(models.build("transformer", vocab_size=30, seq_len=10, d_model=8, n_layers=1,
                                              n_heads=2))
    assert f"({n8:,} parameters)" in out
    bad = _write(tmp_path, 'model = "transformer"\nstesp = 3\n', "bad.toml")
    assert main(["train", "--config-file", str(bad)]) == 2
    assert "unknown keys stesp (did you mean 'steps'?)" in capsys.readouterr().err
    assert main(["train", "--steps", "2"]) == 2
    assert "--model: required" in capsys.readouterr().err


def test_describe_an_experiment_shows_quick_medium_and_full_sizes(capsys):
    assert main(["describe", "gateloop-memory-horizon"]) == 0
    out = capsys.readouterr().out
    assert ("quick -> medium -> full (medium: configs/medium/gateloop-memory-horizon.toml; "
            "full: configs/gateloop-memory-horizon.toml)") in out
    lines = [line.split() for line in out.splitlines()]
    assert ["steps", "250", "1000", "18750"] in lines
    assert ["validation_size", "-", "200", "-"] in lines          # optional: only the medium file sets it
    assert main(["describe", "lightnet-digits"]) == 0                # no medium file: the quick sizes
    assert "(medium: the quick sizes; full: configs/lightnet-digits.toml)" in capsys.readouterr().out


def test_the_medium_profile_reads_configs_medium_and_falls_back_to_quick(monkeypatch):
    from seqlab.experiments import gateloop, lightnet

    medium = gateloop.SIZES["medium"]
    assert medium["steps"] == 1000 and medium["validation_size"] == 200 and medium["betas"] == [0.9, 0.98]
    assert "validation_size" not in gateloop.SIZES["quick"] and "betas" not in gateloop.SIZES["quick"]
    assert gateloop.SIZES["full"]["betas"] == medium["betas"]                       # App. C.1's, in both
    assert lightnet.DIGITS_SIZES["medium"] == lightnet.DIGITS_SIZES["quick"]
    monkeypatch.setenv("SEQLAB_PROFILE", "medium")
    assert _common.profile_sizes(gateloop.SIZES, None, {"steps": 3})["steps"] == 3
    assert _common.profile_sizes(gateloop.SIZES, "quick", {"validation_size": 8})["validation_size"] == 8
    with pytest.raises(TypeError, match="unexpected keyword"):
        _common.profile_sizes(gateloop.SIZES, "quick", {"stepz": 3})


def test_a_folder_of_config_files_is_a_profile(tmp_path):
    from seqlab.experiments import gateloop

    with pytest.raises(ValueError, match="gateloop-memory-horizon.toml' does not exist"):
        _common.profile_sizes(gateloop.SIZES, str(tmp_path), {})
    _write(tmp_path, 'experiment = "gateloop-memory-horizon"\n[sizes]\nseq_len = 24\nsteps = 3\nd_model = 8\n'
           'n_layers = 1\nbatch_size = 8\nlr = 1e-2\nweight_decay = 0.0\ntrain_size = 48\ntest_size = 16\n'
           'validation_size = 8\nbetas = [0.9, 0.98]\n', "gateloop-memory-horizon.toml")
    out = experiments.run("gateloop-memory-horizon", profile=str(tmp_path), progress=False)
    assert out["config"]["validation_size"] == 8 and out["validation"]["fixed"] is not None
    assert out["histories"]["fixed"].split("validation") and not out["histories"]["fixed"].split("test")
    assert out["histories"]["fixed"].config["betas"] == (0.9, 0.98)


def test_the_full_profile_benchmark_projects_a_whole_run(capsys):
    """benchmarks/full_profile.py (gpu-check runs it at full size) on the quick sizes of one experiment."""
    import importlib.util

    path = REPO / "benchmarks" / "full_profile.py"
    spec = importlib.util.spec_from_file_location("full_profile", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = module.project("lightnet-copying", None, "quick", 2)
    assert row["steps"] == 120 and row["ms_per_step"] >= 0
    assert row["projected_min"] * 60 == pytest.approx(row["short_s"] + 118 * row["ms_per_step"] / 1e3)
    assert module.main(["lightnet-copying", "--profile", "quick", "--steps", "2"]) == 0
    assert any(line.split()[:2] == ["lightnet-copying", "120"] for line in capsys.readouterr().out.splitlines())


def test_peak_bandwidth_from_device_properties():
    import importlib.util
    from types import SimpleNamespace

    path = REPO / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("gpu_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    h100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", memory_clock_rate=2_619_000, memory_bus_width=5120)
    assert abs(module.peak_bandwidth(h100) - 3.352e12) < 1e9              # 2 x 2.619 GHz x 640 bytes
    assert module.peak_bandwidth(SimpleNamespace(name="NVIDIA H200")) == 4.8e12
    assert module.peak_bandwidth(SimpleNamespace(name="mystery")) is None


def test_the_readme_config_table_and_train_file_are_true(tmp_path, capsys):
    import re

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Running at paper size"):readme.index("## Benchmarks")]
    listed = re.findall(r"\| `configs/([\w-]+)\.toml` \| ([^|]+) \| ([^|]+) \|", section)
    assert sorted(name for name, _, _ in listed) == sorted(p.stem for p in CONFIGS)
    for name, paper, estimate in listed:
        data = _common.read_config(_common.config_path(name))
        assert paper.strip() == data["paper"]
        assert estimate.strip() == data["estimated_time"].replace(" on one H100", "")
    toml = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    path = _write(tmp_path, toml, "gateloop-lm.toml")
    assert main(["train", "--config-file", str(path), "--steps", "1", "--batch-size", "2", "--no-progress",
                 "--threads", "1", "--task-config", "train_size=8", "test_size=4"]) == 0
    assert "model gateloop" in capsys.readouterr().out


OPTIMISER_KEYS = ("betas", "weight_decay", "clip", "final_lr_ratio")


def _flat(table: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in table.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


@pytest.mark.parametrize("full", [p for p in CONFIGS if (_common.MEDIUM_DIR / p.name).is_file()], ids=lambda p: p.stem)
def test_the_medium_and_full_configs_of_an_experiment_share_their_optimiser(full):
    """The two differ in sizes (steps, widths, the rates tuned for them), never silently in how AdamW is set:
    an optimiser key set in one is set to the same value in the other."""
    medium = _flat(_common.read_config(_common.MEDIUM_DIR / full.name).get("sizes", {}))
    paper = _flat(_common.read_config(full).get("sizes", {}))
    differ = {k: (medium.get(k), paper.get(k)) for k in set(medium) | set(paper)
              if k.rsplit(".", 1)[-1] in OPTIMISER_KEYS and medium.get(k) != paper.get(k)}
    assert not differ, f"{full.name}: medium and full set the optimiser differently: {differ}"


def test_every_size_table_that_trains_names_its_settings_as_trainconfig_does():
    """steps, batch_size, lr (and any other training setting) under TrainConfig's field names, never an alias."""
    from seqlab.train.config import TrainConfig

    aliases = {"max_steps", "iters", "iterations", "n_steps", "learning_rate", "bs", "batch", "wd", "warmup_steps"}
    for name in experiments.names():
        if name in experiments.WITHOUT_CONFIG:
            continue
        for table in _common.TABLES[name]:
            keys = set(table.quick) | set(table.optional)
            assert {"steps", "batch_size"} <= keys and ({"lr", "lrs"} & keys), (name, table.section)
            assert not keys & aliases, (name, sorted(keys & aliases))
            assert {"weight_decay", "warmup", "betas", "eval_every"} & keys <= set(TrainConfig.fields())


def test_a_renamed_size_is_refused_naming_its_new_name(tmp_path):
    from seqlab import experiments

    path = _write(tmp_path, 'experiment = "x"\n[sizes]\na = 2\ntask_kwargs = {}\n')
    with pytest.raises(TypeError, match="task_kwargs is now task_config"):
        _common.file_sizes(path, "x", QUICK)
    with pytest.raises(TypeError, match="task_kwargs is now task_config"):
        experiments.run("lightnet-ablation", task_kwargs={}, progress=False)
