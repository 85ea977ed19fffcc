"""The command line: the notebooks' training loop from a terminal (full-size runs on a GPU).

    python -m seqlab list
    python -m seqlab train --model transformer --task copying --steps 300 --batch-size 64 --lr 3e-3 \\
        [--seed 0 --device auto --checkpoint runs/copy.pt --resume] \\
        [--config d_model=64 n_layers=2] [--task-config max_len=16]
    python -m seqlab experiment NAME [key=value ...] [--config-file configs/NAME.toml] [--checkpoint-dir DIR]
    python -m seqlab train --config-file run.toml [--steps 5000 ...]   # options from a TOML file
    python -m seqlab describe NAME         # a model's, task's or experiment's parameters and defaults
    python -m seqlab evaluate PATH         # a checkpoint's model on its task (seqlab.load(PATH) in Python)
    python -m seqlab generate PATH --prompt "To be"  # continue a prompt (--ids 3 5 8 for token ids)
    python -m seqlab generate PATH --prompt "To be" --prompt "A"   # several prompts, of any lengths, together
    python -m seqlab generate PATH --prompt "To be" --stop '\\n' --stream   # stop at a newline, print as sampled
    SEQLAB_PROFILE=medium python -m seqlab reproduce [ID ...] [--seeds 3] [--redo]   # the papers' claims

Ctrl-C during ``train --checkpoint PATH`` saves the run there and says how to resume it; resuming with a
larger ``--steps`` extends the run (on the schedule of the new total). ``experiment --checkpoint-dir DIR``
saves each of the experiment's runs in DIR: the same command again resumes where it stopped.

``train --config-file FILE`` reads the options from a TOML file: the long options' names with ``_`` for
``-`` (``model``, ``task``, ``steps``, ``batch_size``, ``lr``, ...) and the tables ``[config]`` (the model
config) and ``[task_config]``; options on the command line win. ``experiment NAME --config-file FILE``
runs the experiment at the sizes of FILE, laid out like the files in ``configs/`` (the full profile).
Both work under ``torchrun``.

``key=value`` values are read as Python literals (``3``, ``1e-3``, ``True``, ``"mean"``, ``(4, 4)``)
and otherwise kept as strings.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import json
import os
import sys

from seqlab.train import interrupt
from seqlab.train.interrupt import CHECKPOINT_EVERY, CHECKPOINT_SECONDS


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


def resume_hint(args, stop) -> str:
    """How the stopped command resumes: ``train`` from its checkpoint, ``experiment`` and ``reproduce`` by the
    same command again (an experiment only with a checkpoint folder)."""
    checkpoint = getattr(stop, "checkpoint", None)
    if args.func is cmd_train:
        again = " ".join(a for a in args.argv if a != "--resume") + " --resume"
        return f"; resume with: python -m seqlab {again}" if checkpoint else ""
    folder = args.func is cmd_experiment and (args.checkpoint_dir or any(
        str(p).startswith("checkpoint_dir=") for p in (args.params or [])))      # the flag or the key=value
    if args.func is cmd_experiment and not (checkpoint or folder):
        return "; add --checkpoint-dir DIR to make an experiment resumable"
    if args.func in (cmd_experiment, cmd_reproduce):
        return "; run the same command again to resume"
    return ""


def _main_rank() -> bool:
    """Whether this process prints and writes: always, except on ranks other than 0 under torchrun (their
    output is dropped)."""
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if not main_rank:
        sys.stdout = open(os.devnull, "w")
    return main_rank


TRAIN_FILE_TABLES = ("config", "task_config")

# TrainConfig's fields that train takes as flags (--batch-size is batch_size)
TRAIN_FLAGS = ("steps", "batch_size", "lr", "seed", "device", "eval_every", "eval_split", "weight_decay", "betas",
               "warmup", "clip", "final_lr_ratio", "threads", "checkpoint", "checkpoint_every", "checkpoint_seconds",
               "resume")

# train's own options, beside TrainConfig's fields (their defaults come from TrainConfig.defaults())
TRAIN_OPTIONS = {"model": None, "task": None, "config": None, "task_config": None, "print_every": None,
                 "no_progress": False, "json": False, "history": None}


def train_defaults() -> dict:
    """The default of every ``train`` option: TrainConfig's fields that are flags, then train's own."""
    from seqlab.train.config import TrainConfig

    fields = TrainConfig.defaults()
    return {**{k: fields[k] for k in TRAIN_FLAGS}, **TRAIN_OPTIONS}


def read_train_file(path: str) -> dict:
    """The options of a ``train --config-file`` TOML file: ``train``'s options and the two tables."""
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"--config-file: {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"--config-file: {path!r} is not valid TOML: {err}") from None
    options = set(train_defaults()) - set(TRAIN_FILE_TABLES)
    unknown = sorted(set(data) - options - set(TRAIN_FILE_TABLES))
    if unknown:
        hints = [f"{k} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, sorted(options), n=1)) else k
                 for k in unknown]
        raise ValueError(f"--config-file: {path!r} has unknown keys {', '.join(hints)}; the options are "
                         f"{sorted(options)} and the tables [config] and [task_config]")
    for table in TRAIN_FILE_TABLES:
        if table in data and not isinstance(data[table], dict):
            raise ValueError(f"--config-file: {path!r}: {table} must be a table ([{table}]), got {data[table]!r}")
    return data


def complete_train_args(args: argparse.Namespace) -> argparse.Namespace:
    """``train``'s options as the run takes them: the command line's, else the ``--config-file``'s, else the
    defaults (the train parser leaves out every option not typed, so that a file's value is never taken for a
    default)."""
    data = read_train_file(args.config_file) if args.config_file else {}
    for table in TRAIN_FILE_TABLES:
        setattr(args, f"file_{table}", data.pop(table, {}))
    for name, default in train_defaults().items():
        if not hasattr(args, name):
            setattr(args, name, data.get(name, default))
    return args


def cmd_train(args) -> int:
    import torch
    from tqdm.auto import tqdm

    from seqlab import config, models, tasks, train

    main_rank = _main_rank()     # under torchrun, rank 0 alone prints and writes
    for name in ("model", "task"):
        if not getattr(args, name):
            raise ValueError(f"--{name}: required (on the command line or as {name} = ... in --config-file)")
    task = tasks.get(args.task, **{**args.file_task_config, **parse_pairs(args.task_config, "--task-config")})
    model_cfg = {**args.file_config, **parse_pairs(args.config, "--config")}
    fixed = sorted({"vocab_size", "num_classes", "seq_len"} & set(model_cfg))
    if fixed:
        raise ValueError(f"--config: {', '.join(fixed)} come from the task; set them through --task-config instead")
    torch.manual_seed(args.seed)      # the initial weights are part of the run: --seed fixes them too
    model = models.build(args.model, vocab_size=task.vocab_size, num_classes=task.num_classes,
                         seq_len=task.seq_len, **model_cfg)
    device = config.device(args.device)
    kind = "a language model" if task.num_classes is None else f"{task.num_classes} classes"
    print(f"model {args.model} ({models.count_parameters(model):,} parameters) on task {args.task} "
          f"(seq_len {task.seq_len}, vocab {task.vocab_size}, {kind}); device {device}")
    if args.resume and args.checkpoint and not os.path.exists(args.checkpoint):
        print(f"no checkpoint at {args.checkpoint}: starting fresh")    # a resumed run says so as it reads the file
    every = args.print_every or max(1, args.steps // 10)
    history = train.fit(model, task, train_config(args, model_cfg, task.task_config, device),
                        callbacks=[train.PrintCallback(every, print_fn=tqdm.write)])
    final = history.final or {}
    print("final " + " ".join(f"{k}={v:.4f}" for k, v in final.items() if isinstance(v, float)))
    if args.history and main_rank:
        write_history(history, args.history)
    if args.json:
        print(json.dumps({"final": final, "steps": history.steps}))
    return 0


def train_config(args, model_config: dict, task_config: dict, device):
    """The run's :class:`~seqlab.train.config.TrainConfig`: every flag of ``train`` is one of its fields."""
    from seqlab.train.config import TrainConfig

    given = {name: getattr(args, name) for name in TrainConfig.fields() if hasattr(args, name)}
    # a bar where a terminal shows it; piped to a file, the printed lines alone (no bar fragments)
    progress = not args.no_progress and sys.stderr.isatty()
    return TrainConfig(**{**given, "device": device, "progress": progress, "model": args.model,
                          "model_config": model_config, "task": args.task, "task_config": dict(task_config)})


def write_history(history, path: str) -> None:
    """``{"train": [{"step", "loss"}, ...], "eval": [every evaluation record]}`` as JSON."""
    train_rows = [{"step": r["step"], "loss": r["loss"]} for r in history.records if r["split"] == "train"]
    evals = [r for r in history.records if r["split"] != "train"]
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"train": train_rows, "eval": evals}, f, indent=1, default=_jsonable)


def cmd_evaluate(args) -> int:
    from seqlab import tasks, train

    model = train.load_model(args.checkpoint, device=args.device)
    run = model.run
    task = tasks.get(run["task"], **(run.get("task_config") or {}))
    metrics = train.evaluate(model, task, args.split, batch_size=args.batch_size)
    print(f"{run['model']} on {run['task']} ({args.split}): "
          + " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    if args.json:
        print(json.dumps(metrics, default=_jsonable))
    return 0


def _cli_stop(values: list[str] | None, text: bool) -> list | None:
    """``--stop`` values: token ids, or, for a text prompt, one character each (backslash escapes such as ``\\n``
    read as in Python; a value of one character is that character, any other an id)."""
    if not values:
        return None
    import codecs

    stop = []
    for value in values:
        char = codecs.decode(value, "unicode_escape") if text and "\\" in value else value
        if text and len(char) == 1:
            stop.append(char)
            continue
        try:
            stop.append(int(value))
        except ValueError:
            want = "a token id or one character" if text else "a token id"
            raise ValueError(f"--stop: expected {want}, got {value!r}") from None
    return stop


def cmd_generate(args) -> int:
    import torch

    from seqlab import train
    from seqlab.sampling import generate

    model = train.load_model(args.checkpoint, device=args.device)
    task = model.run["task"]
    seeds = args.seed if isinstance(args.seed, list) else [args.seed]
    n_prompts = len(args.ids if args.ids is not None else args.prompt)
    if len(seeds) > 1 and len(seeds) != n_prompts:
        raise ValueError(f"--seed: expected one seed, or one per prompt ({n_prompts}), got {len(seeds)}")
    if args.stream and n_prompts > 1:
        raise ValueError("--stream: prints one prompt's tokens as they come; give one --prompt (or --ids)")
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
              seed=seeds if len(seeds) > 1 else seeds[0], stop=_cli_stop(args.stop, args.ids is None))
    if args.ids is not None:                     # one line of ids per prompt
        if args.stream:                          # the prompt, then each new id as it is sampled
            print(" ".join(map(str, args.ids[0])), end="", flush=True)
            generate(model, torch.tensor(args.ids[0]), on_token=lambda r, p, t: print(f" {t}", end="", flush=True),
                     **kw)
            print()
            return 0
        if len(args.ids) == 1:
            rows = generate(model, torch.tensor(args.ids[0]), **kw)
        else:                                    # prompts of different lengths decode together
            rows = generate(model, [list(ids) for ids in args.ids], **kw)
            rows = rows if isinstance(rows, list) else list(rows)
        for row in rows:
            print(" ".join(map(str, row.tolist())))
        return 0
    if task != "text":
        raise ValueError(f"--prompt: a text prompt needs a model of the character-level text task; this one was "
                         f"trained on {task!r}: give token ids with --ids instead")
    if args.stream:                              # the prompt, then each new character as it is sampled
        from seqlab.tasks.text import decode, encode

        print(decode(encode(args.prompt[0])), end="", flush=True)
        generate(model, args.prompt[0], on_token=lambda r, p, t: print(chr(t), end="", flush=True), **kw)
        print()
    elif len(args.prompt) == 1:
        print(generate(model, args.prompt[0], **kw))
    else:                                        # the continuations in turn, a line '---' between them
        print("\n---\n".join(generate(model, list(args.prompt), **kw)))
    return 0


def _described(name: str):
    """``(kind, function)`` for a model, task or experiment name; a clear error with a suggestion otherwise."""
    from seqlab import experiments, models, tasks
    from seqlab.models import registry
    from seqlab.train.config import TrainConfig

    if name in ("train", "TrainConfig"):
        return "training settings (TrainConfig: the train command's flags, its TOML keys, fit's keywords)", TrainConfig
    if name in models.names():
        return "model", registry.builder(name)
    if name in tasks.NAMES:
        return "task", getattr(tasks, name)
    if name in experiments.names():
        return "experiment", experiments.get(name)
    known = models.names() + list(tasks.NAMES) + experiments.names()
    near = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ValueError(f"describe: no model, task or experiment is named {name!r}{hint} "
                     "(python -m seqlab list shows them)")


def _param_line(doc: str, param: str) -> str:
    """The first docstring line that names ``param`` (``param``, ``param:`` or ``param=``), trimmed."""
    for line in doc.splitlines():
        text = line.strip().lstrip("-* ")
        if f"``{param}``" in text or text.startswith((f"{param}:", f"{param} ", f"{param}=")):
            return text if len(text) <= 110 else text[:107] + "..."
    return ""


def cmd_describe(args) -> int:
    kind, fn = _described(args.name)
    doc = inspect.getdoc(fn) or ""
    print(f"{kind} {args.name}: {doc.splitlines()[0] if doc else ''}" if not kind.startswith("training")
          else f"train: {kind}")
    skip = {"vocab_size", "num_classes", "seq_len"} if kind == "model" else set()
    if args.name in ("train", "TrainConfig"):
        for name, default in fn.defaults().items():
            print(f"  {name:<18} {'default ' + repr(default):<24} {_param_line(doc, name)}".rstrip())
        return 0
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in skip:
            continue
        default = "required" if p.default is p.empty else f"default {p.default!r}"
        print(f"  {p.name:<18} {default:<24} {_param_line(doc, p.name)}".rstrip())
    if kind == "model":
        print("  (vocab_size, num_classes and seq_len come from the task)")
    if kind == "experiment":
        _describe_sizes(args.name)
    return 0


def _describe_sizes(name: str) -> None:
    """An experiment's sizes (keywords it also takes): quick, medium and full side by side, and where they live."""
    from seqlab import experiments

    for table in experiments.size_tables(name):
        print(f"  sizes{f' for {table.section}' if table.section else ''}, quick -> medium -> full "
              f"({table.medium_note}; {table.full_note}):")
        for key, quick, medium, full in table.rows:
            print(f"    {key:<16} {quick:<24} {medium:<24} {full}".rstrip())


def cmd_experiment(args) -> int:
    from seqlab import experiments

    _main_rank()                 # under torchrun, ranks other than 0 print nothing
    kwargs = parse_pairs(args.params, "experiment")
    if args.config_file:
        if "profile" in kwargs:
            raise ValueError("--config-file: give either --config-file or profile=..., not both")
        kwargs["profile"] = args.config_file
    if args.checkpoint_dir:
        kwargs["checkpoint_dir"] = args.checkpoint_dir
    result = experiments.run(args.name, **kwargs)
    print(json.dumps(result, indent=2, default=_jsonable))
    return 0


def cmd_reproduce(args) -> int:
    """Run the named claims (every claim without ids) over ``--seeds`` seeds; print one summary table."""
    from seqlab import claims, config

    profile = args.profile or config.profile()
    ids = args.ids or list(claims.CLAIMS)
    for cid in ids:
        claims.get(cid)                 # every id checked before anything runs
    out = args.out or claims.default_out(profile)
    records = claims.reproduce(ids, profile=profile, seeds=args.seeds, out=out, redo=args.redo,
                               progress=not args.no_progress)
    print(claims.summary_table(records))
    print(f"records, figures, claims.json and README.md in {out}")
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m seqlab", description="seqlab: train models and run experiments")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list the models, tasks and experiments").set_defaults(func=cmd_list)

    t = sub.add_parser("train", help="train a model on a task (seqlab.train.fit)", argument_default=argparse.SUPPRESS)
    t.add_argument("--config-file", default=None, metavar="FILE.toml",
                   help="read the options from a TOML file (module doc); options given here win")
    t.add_argument("--model", help="a name from `python -m seqlab list` (required)")
    t.add_argument("--task", help="a name from `python -m seqlab list` (required)")
    t.add_argument("--steps", type=int, help="optimizer steps (default 300)")
    t.add_argument("--batch-size", type=int, help="examples per step (default 64)")
    t.add_argument("--lr", type=float, help="AdamW's peak learning rate (default 3e-3)")
    t.add_argument("--seed", type=int, help="the initial weights, the batch order and dropout (default 0)")
    t.add_argument("--device", help="auto, cpu or cuda (default auto)")
    t.add_argument("--eval-every", type=int, help="evaluate every so many steps (default: at the end only)")
    t.add_argument("--eval-split", help="the split evaluated while training (default test)")
    t.add_argument("--weight-decay", type=float, help="AdamW's, on matrices (default 0.01)")
    t.add_argument("--betas", type=float, nargs=2, metavar=("B1", "B2"),
                   help="AdamW's (default 0.9 0.95)")
    t.add_argument("--warmup", type=int, help="linear warm-up steps (default min(100, steps // 10))")
    t.add_argument("--clip", type=float, help="gradient-norm clipping (default 1.0)")
    t.add_argument("--final-lr-ratio", type=float, help="the cosine decay ends at this share of --lr")
    t.add_argument("--threads", type=int, help="CPU intra-op threads (1 is fastest for small models "
                   "on a busy machine)")
    t.add_argument("--checkpoint", help="file to save the run to (and resume from); also written "
                   "on Ctrl-C, SIGTERM and SIGUSR1 (after the step in progress; exit code 130, 143, 138)")
    t.add_argument("--checkpoint-every", type=int, metavar="STEPS",
                   help=f"periodic saves every STEPS steps (default {CHECKPOINT_EVERY}) or every --checkpoint-seconds, "
                        "whichever comes first: what a kill -9 or a node failure can lose")
    t.add_argument("--checkpoint-seconds", type=float, metavar="S",
                   help=f"periodic saves every S seconds of wall time (default {CHECKPOINT_SECONDS:g})")
    t.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists (a larger "
                   "--steps extends the run, on the schedule of the new total)")
    t.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="model config, e.g. d_model=64 n_layers=2 n_heads=4 (python -m seqlab list shows the models)")
    t.add_argument("--task-config", nargs="*", metavar="KEY=VALUE", help="task arguments, e.g. max_len=16")
    t.add_argument("--print-every", type=int, help="print the loss every so many steps (default a tenth of --steps)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="also print the final metrics as one JSON line")
    t.add_argument("--history", metavar="PATH.json",
                   help="write the per-step training losses and every evaluation there")
    t.set_defaults(func=cmd_train)

    v = sub.add_parser("evaluate", help="evaluate a checkpoint's model on its task (rebuilt from the checkpoint)")
    v.add_argument("checkpoint")
    v.add_argument("--split", default="test")
    v.add_argument("--batch-size", type=int, default=256)
    v.add_argument("--device", default="auto")
    v.add_argument("--json", action="store_true", help="also print the metrics as one JSON line")
    v.set_defaults(func=cmd_evaluate)

    g = sub.add_parser("generate", help="continue a prompt with a checkpoint's causal language model")
    g.add_argument("checkpoint")
    source = g.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", action="append",
                        help="text (a model of the character-level text task); repeat it for several prompts, of "
                             "any lengths, decoded together and printed in turn with a line '---' between them")
    source.add_argument("--ids", type=int, nargs="+", action="append",
                        help="token ids (a model of any other language-model task); repeat it for several prompts "
                             "(--ids 3 5 8 --ids 2 4), printed one line each")
    g.add_argument("--max-new-tokens", type=int, default=200)
    g.add_argument("--temperature", type=float, default=1.0, help="0: greedy decoding")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling: the most likely tokens whose "
                                                             "probabilities first reach this mass")
    g.add_argument("--seed", type=int, nargs="+", default=0,
                   help="one seed for the batch, or one per prompt (each row then samples what its prompt alone "
                        "would with that seed)")
    g.add_argument("--stop", nargs="+", metavar="TOKEN", default=None,
                   help="stop tokens: a row ends at the first one it emits (printed with it); token ids, or for "
                        "--prompt one character each (escapes such as '\\n' read as in Python)")
    g.add_argument("--stream", action="store_true",
                   help="print the new tokens (characters for --prompt) as they are sampled; one prompt only")
    g.add_argument("--device", default="auto")
    g.set_defaults(func=cmd_generate)

    d = sub.add_parser("describe", help="a model's, task's or experiment's parameters, defaults and meaning")
    d.add_argument("name")
    d.set_defaults(func=cmd_describe)

    e = sub.add_parser("experiment", help="run a registered experiment (seqlab.experiments.run)")
    e.add_argument("name")
    e.add_argument("params", nargs="*", metavar="KEY=VALUE")
    e.add_argument("--config-file", default=None, metavar="FILE.toml",
                   help="run at the sizes of this file (configs/NAME.toml: the paper's sizes)")
    e.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="save each run of the experiment in DIR; the same command again resumes")
    e.set_defaults(func=cmd_experiment)

    r = sub.add_parser("reproduce", help="reproduce the papers' claims over several seeds (results/claims.json)")
    r.add_argument("ids", nargs="*", metavar="ID", help="claims to run (default: all; seqlab.claims.CLAIMS)")
    r.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default 3)")
    r.add_argument("--profile", default=None, help="quick, medium, full or a folder of config files (default: "
                   "$SEQLAB_PROFILE)")
    r.add_argument("--redo", action="store_true", help="run again what is already done or kept for these claims")
    r.add_argument("--out", default=None, metavar="DIR", help="where records go (default: results/ for medium, "
                   "results/<profile>/ otherwise)")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.set_defaults(func=cmd_reproduce)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, parsed once; ``train``'s options completed from ``--config-file`` and the defaults."""
    args = make_parser().parse_args(argv)
    return complete_train_args(args) if args.command == "train" else args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.argv = list(sys.argv[1:] if argv is None else argv)     # for the resume line after a Ctrl-C
    try:
        with interrupt.handling():          # SIGTERM and SIGUSR1 stop a command as Ctrl-C does
            return args.func(args)
    except KeyboardInterrupt as stop:       # the one interrupt path of every command: what stopped, how to resume
        if _main_rank():
            print(f"\n{stop or 'stopped by SIGINT'}{resume_hint(args, stop)}", file=sys.stderr, flush=True)
        return interrupt.exit_code(getattr(stop, "signum", 2))
    except (ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
