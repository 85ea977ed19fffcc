"""The command line: the notebooks' training loop from a terminal (full-size runs on a GPU).

    python -m seqlab list
    python -m seqlab train --model transformer --task copying --steps 300 --batch-size 64 --lr 3e-3 \\
        [--seed 0 --device auto --checkpoint runs/copy.pt --resume] \\
        [--config d_model=64 n_layers=2] [--task-config max_len=16]
    python -m seqlab experiment NAME [key=value ...]

``key=value`` values are read as Python literals (``3``, ``1e-3``, ``True``, ``"mean"``, ``(4, 4)``)
and otherwise kept as strings.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys


def parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_pairs(pairs: list[str] | None, what: str) -> dict:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what}: expected key=value, got {pair!r}")
        out[key.replace("-", "_")] = parse_value(value)
    return out


def _jsonable(obj):
    from seqlab.train import History

    if isinstance(obj, History):
        return {"final": obj.final, "steps": obj.steps}
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return repr(obj)


def cmd_list(args) -> int:
    from seqlab import experiments, models, tasks

    print("models:      " + ", ".join(models.names()))
    print("tasks:       " + ", ".join(tasks.NAMES))
    print("experiments: " + ", ".join(experiments.names()))
    return 0


def cmd_train(args) -> int:
    import torch

    from seqlab import config, models, tasks, train

    task = tasks.get(args.task, **parse_pairs(args.task_config, "--task-config"))
    model_cfg = parse_pairs(args.config, "--config")
    fixed = sorted({"vocab_size", "num_classes", "seq_len"} & set(model_cfg))
    if fixed:
        raise ValueError(f"--config: {', '.join(fixed)} come from the task; set them through --task-config instead")
    torch.manual_seed(args.seed)      # the initial weights are part of the run: --seed fixes them too
    model = models.build(args.model, vocab_size=task.vocab_size, num_classes=task.num_classes,
                         seq_len=task.seq_len, **model_cfg)
    device = config.device(args.device)
    print(f"model {args.model} ({models.count_parameters(model):,} parameters) on task {args.task} "
          f"(seq_len {task.seq_len}, vocab {task.vocab_size}, classes {task.num_classes}); device {device}")
    every = args.print_every or max(1, args.steps // 10)
    history = train.fit(model, task, steps=args.steps, batch_size=args.batch_size, lr=args.lr, device=device,
                        seed=args.seed, eval_every=args.eval_every, checkpoint=args.checkpoint,
                        checkpoint_every=args.checkpoint_every, resume=args.resume,
                        callbacks=[train.PrintCallback(every)], progress=not args.no_progress,
                        threads=args.threads)
    final = history.final or {}
    print("final " + " ".join(f"{k}={v:.4f}" for k, v in final.items() if isinstance(v, float)))
    if args.json:
        print(json.dumps({"final": final, "steps": history.steps}))
    return 0


def cmd_experiment(args) -> int:
    from seqlab import experiments

    result = experiments.run(args.name, **parse_pairs(args.params, "experiment"))
    print(json.dumps(result, indent=2, default=_jsonable))
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m seqlab", description="seqlab: train models and run experiments")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list the models, tasks and experiments").set_defaults(func=cmd_list)

    t = sub.add_parser("train", help="train a model on a task (seqlab.train.fit)")
    t.add_argument("--model", required=True, help="a name from `python -m seqlab list`")
    t.add_argument("--task", required=True, help="a name from `python -m seqlab list`")
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default="auto")
    t.add_argument("--eval-every", type=int, default=None)
    t.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (1 is fastest for small models "
                   "on a busy machine)")
    t.add_argument("--checkpoint", default=None, help="file to save the run to (and resume from)")
    t.add_argument("--checkpoint-every", type=int, default=None)
    t.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    t.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="model config, e.g. d_model=64 n_layers=2 n_heads=4 (python -m seqlab list shows the models)")
    t.add_argument("--task-config", nargs="*", metavar="KEY=VALUE", help="task arguments, e.g. max_len=16")
    t.add_argument("--print-every", type=int, default=None)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="also print the final metrics as one JSON line")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("experiment", help="run a registered experiment (seqlab.experiments.run)")
    e.add_argument("name")
    e.add_argument("params", nargs="*", metavar="KEY=VALUE")
    e.set_defaults(func=cmd_experiment)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
