"""Add to the recall sweep's recorded runs how each answered its test queries, from the final weights its sittings
kept (runs recorded before ``seqlab.experiments.recall_sweep`` measured it as it trains).

    .venv/bin/python tools/sweep_answers.py                       # the medium record, results/.runs/recall-sweep
    .venv/bin/python tools/sweep_answers.py RECORD CHECKPOINT_DIR

For each run without ``answers``: its checkpoint (``CHECKPOINT_DIR/<run name>.pt``, written by the sitting that
trained it; git-ignored, so on the machine that ran it only) must be at the run's last step; the model is rebuilt
as the run built it, loaded, and :func:`seqlab.experiments.recall_sweep.answers_on_test` read on the test split.
The answers are kept only when they give back the run's recorded test accuracy (to the record's 6 decimals): the
same weights, the same data. Runs without a checkpoint, stopped early or diverged keep no answers; each is listed.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def answers_from_checkpoints(record: Path, folder: Path) -> tuple[dict, list[str]]:
    """``({run_key: {"answers": ...}}, [why each run left out])`` for the record's runs without answers."""
    import torch

    from seqlab import config, models, results
    from seqlab.experiments._common import checkpointing
    from seqlab.experiments.arena_runner import make_task
    from seqlab.experiments.recall_sweep import answers_on_test, run_name
    from seqlab.experiments.recall_sweep_plan import model_config, plan_cells, run_key

    data = results.read(record)
    cfg = data["config"]
    cells = {(c["cell"], c["pairs"]): c for c in plan_cells(cfg)}
    found, left = {}, []
    for run in data["runs"]:
        if "answers" in run:
            continue
        spec = {**cells[(run["cell"], run["pairs"])], "seed": run["seed"], "lr": run["lr"]}
        name = run_name(spec, cfg)
        path = Path(checkpointing(folder, name, cfg["steps"])["checkpoint"])
        if run.get("diverged") or not path.is_file():
            left.append(f"{name}: {'diverged' if run.get('diverged') else 'no checkpoint'}")
            continue
        saved = torch.load(path, map_location="cpu", weights_only=False)
        if saved["step"] != run["steps"]:
            left.append(f"{name}: checkpoint at step {saved['step']} of {run['steps']}")
            continue
        with config.one_math_thread():
            task = make_task("mqar", {**cfg["mqar"], "num_kv_pairs": run["pairs"]}, run["seed"], cfg)
            model = models.build(run["family"], vocab_size=task.vocab_size, seq_len=task.seq_len,
                                 **model_config(run["family"], run["knobs"], run["d_model"], cfg["n_layers"]))
            model.load_state_dict(saved["model"])
            answers = answers_on_test(model, task, run["pairs"])
        correct, asked = (sum(x) for x in zip(*answers["by_pair"]))
        if round(correct / asked, 6) != run["accuracy"]:
            left.append(f"{name}: test accuracy {correct / asked:.6f} from the checkpoint, {run['accuracy']} recorded")
            continue
        found[run_key(run)] = {"answers": answers}
    return found, left


def main(argv: list[str]) -> int:
    from seqlab import results
    from seqlab.experiments.recall_sweep_plan import run_key

    record = Path(argv[0]) if argv else ROOT / "results" / "arena" / "recall-sweep-medium.json"
    folder = Path(argv[1]) if len(argv) > 1 else ROOT / "results" / ".runs" / "recall-sweep"
    found, left = answers_from_checkpoints(record, folder)
    changed = results.amend(record, key=run_key, fields=found)
    print(f"{record}: answers added to {changed} runs; left without: {len(left)}")
    for why in left:
        print(f"  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
