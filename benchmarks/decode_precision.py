"""The decoding state's precision: how far each causal family's logits move when its state is kept in float32,
bfloat16 or float16 (``model.init_state(dtype=)``), with the weights in float32 or bfloat16.

    .venv/bin/python benchmarks/decode_precision.py                       # 4,096 generated tokens, every family
    .venv/bin/python benchmarks/decode_precision.py --quick --models lrnn # 48 tokens: a smoke test
    .venv/bin/python benchmarks/decode_precision.py --markdown benchmarks/results/decode_precision.md \
        --json benchmarks/results/decode_precision.json                   # the committed record (lesson 07 draws it)

Small random models: ``d_model=32``, 2 layers, vocabulary 64, the registry's defaults otherwise (2 heads where a
family has heads; learned positions sized to the run), weights from ``torch.manual_seed(0)``, one sequence.
For each family and weight dtype the weights are rounded to that dtype once; the reference is the same weights
in float64 with a float64 state, prefilled on a random 8-token prompt, then greedy for ``--tokens`` tokens. Each
state dtype then decodes the same prompt **teacher-forced on the reference's tokens** (so a difference does not
compound through different tokens), and the table gives:

- ``max |dlogit|``: the largest absolute logit difference from the float64 decode over the generated tokens
  (the logits' own scale, ``max |logit|`` of the reference, is printed with each family);
- ``departs at``: the first generated position whose greedy choice (the argmax of this decode's logits, after
  the same prefix) differs from float64's: where free greedy decoding would first depart; ``-`` if never.

Every step computes in float32 and stores the state back in its dtype (``seqlab.models.decoding``), and the
logits come back in float32 whatever the weights. GateLoop's and the LRNN's complex states stay complex64 for
every state dtype but float64 (torch has no complex bfloat16/float16) and these models have no short conv, so
their rows measure the float32 compute alone, the same for every state dtype. A bfloat16/float16 state that
accumulates every token (Linear Transformer, linear CausalRN, LightNet's additive decay) warns in ``init_state``;
those rows are marked ``(warned)``. The logits of these random models are small (``max |logit|`` about 0.5) and
close together, so a greedy choice flips on small differences: ``departs at`` is a pessimistic reading.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import torch

LMS = ("transformer", "linear-transformer", "causalrn", "linear-causalrn", "lrnn", "lightnet", "gateloop",
       "deltanet", "gated-deltanet")
LEARNED_POSITIONS = {"transformer", "causalrn"}
HEADS = {"transformer", "linear-transformer", "lightnet", "deltanet", "gated-deltanet"}
STATE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
WEIGHT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
VOCAB, PROMPT, D_MODEL, LAYERS = 64, 8, 32, 2
FULL_TOKENS, QUICK_TOKENS = 4096, 48


def build(name: str, n_tokens: int, weights: torch.dtype):
    """A random language model of this family with its weights rounded to ``weights``."""
    from seqlab import models

    extra = {"n_heads": 2} if name in HEADS else {}
    if name in LEARNED_POSITIONS:
        extra["max_len"] = PROMPT + n_tokens + 1
    torch.manual_seed(0)
    return models.build(name, vocab_size=VOCAB, d_model=D_MODEL, n_layers=LAYERS, **extra).to(weights).eval()


def measure(name: str, n_tokens: int, weight_dtypes, state_dtypes) -> list[dict]:
    """One row per weight dtype and state dtype, from ``seqlab.readout.decode_drift``."""
    from seqlab import readout

    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    rows = []
    for wname in weight_dtypes:
        drift = readout.decode_drift(build(name, n_tokens, WEIGHT_DTYPES[wname]), prompt, n_tokens,
                                     [STATE_DTYPES[s] for s in state_dtypes])
        for sname in state_dtypes:
            d = drift["dlogit"][STATE_DTYPES[sname]]
            finite = bool(torch.isfinite(d).all())
            rows.append({"model": name, "weights": wname, "state": sname,
                         "max_abs_dlogit": float(d.max()), "logit_scale": drift["logit_scale"],
                         "departs_at": drift["departs_at"][STATE_DTYPES[sname]],
                         "warned": drift["warned"][STATE_DTYPES[sname]], "finite": finite})
    return rows


def table(rows: list[dict]) -> str:
    head = f"| {'model':<18} | {'weights':<8} | {'state':<17} | {'max abs dlogit':>14} | {'max abs logit':>13} | " \
           f"{'departs at':>10} |"
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        d = "-" if r["departs_at"] is None else str(r["departs_at"])
        note = " (warned)" if r["warned"] else ""
        dl = f"{r['max_abs_dlogit']:.2e}" if r["finite"] else "non-finite"
        lines.append(f"| {r['model']:<18} | {r['weights']:<8} | {r['state'] + note:<17} | {dl:>14} | "
                     f"{r['logit_scale']:>13.2f} | {d:>10} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(LMS), choices=LMS)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_TOKENS} generated tokens (a smoke test)")
    p.add_argument("--tokens", type=int, default=None, help=f"generated tokens (default {FULL_TOKENS})")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--weights", nargs="+", default=list(WEIGHT_DTYPES), choices=list(WEIGHT_DTYPES))
    p.add_argument("--states", nargs="+", default=list(STATE_DTYPES), choices=list(STATE_DTYPES))
    p.add_argument("--markdown", default=None, metavar="PATH", help="also write the table, command and machine")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows, command and machine as JSON")
    args = p.parse_args(argv)
    n = args.tokens or (QUICK_TOKENS if args.quick else FULL_TOKENS)
    torch.set_num_threads(args.threads)
    start = time.time()
    header = (f"state precision: d_model={D_MODEL}, {LAYERS} layers, vocab {VOCAB}, random weights (seed 0), "
              f"prompt {PROMPT} tokens, {n} generated tokens, batch 1, teacher-forced on the float64 greedy decode; "
              f"{args.threads} thread(s)")
    print(header, flush=True)
    rows = []
    for name in args.models:
        t0 = time.time()
        got = measure(name, n, args.weights, args.states)
        rows += got
        print(table(got), f"\n({name}: {time.time() - t0:.0f} s)", flush=True)
    text = table(rows)
    print("\n" + text)
    cmd = " ".join([".venv/bin/python benchmarks/decode_precision.py", *(sys.argv[1:] if argv is None else argv)])
    machine = (f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), "
               f"torch {torch.__version__}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"setting": header, "command": cmd, "date": datetime.date.today().isoformat(),
                       "machine": machine, "tokens": n, "run_s": round(time.time() - start), "rows": rows},
                      f, indent=1)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(f"# Decoding state precision\n\n{header}.\n\n"
                    f"- command: `{cmd}`\n- date: {datetime.date.today().isoformat()}\n"
                    f"- machine: {machine}\n"
                    f"- run time: {time.time() - start:.0f} s\n\n"
                    "`max abs dlogit`: largest logit difference from the float64 decode (same weights, same tokens);"
                    " `departs at`: first generated position whose greedy token differs from float64's (`-`: never)."
                    " Every step computes in float32 and stores the state in its dtype; GateLoop's and the LRNN's"
                    " complex states stay complex64 for every state dtype below. `(warned)`: `init_state` warned"
                    " (StatePrecisionWarning: a low-precision state that accumulates every token). The random"
                    " models' logits are small and close together, so `departs at` is a pessimistic reading.\n\n"
                    + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
