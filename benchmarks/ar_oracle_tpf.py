"""How many tokens per forward would a block model as sure as its AR original commit? (issue 22's target)

    python benchmarks/ar_oracle_tpf.py --ar ~/.cache/orl/gemma-3-270m --corpus ~/.cache/orl/corpus/<key> \
        --windows 32 --context 64 --tokens 32 --blocks 4,16 --thresholds 0.9,0.7,0.5,0.3 --out x.json

The AR original continues each held-out window greedily (the windows of convert_eval.py); one
teacher-forced forward over prefix + continuation gives c_i, the probability it gave its own i-th token.
A block decoder under the threshold rule commits, in one forward, every masked position whose
probability reaches tau (at least one). If position j is the first masked one, a block model that
knows the AR original's joint distribution gives the greedy token at j + m at least the greedy path's
probability c_j * ... * c_(j+m), so the reference rule here commits positions j..k in one forward
while that product reaches tau, and decodes exactly the AR original's greedy text. Its TPF (all tokens
/ all forwards, per block of B) is a reference for a converted model at the same threshold, not a
bound either way: true marginals can exceed the path product (several paths to one token); below 0.5
a greedy token can reach tau without being its marginal's argmax; and the engine's rule also commits
positions out of order and forces the most confident one, not the leftmost (orl/engine/commit.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.convert_eval import emit, held_out_rows  # noqa: E402
from orl.checkpoint import load_checkpoint  # noqa: E402
from orl.engine.ar import ARConfig, ARDecoder  # noqa: E402
from orl.model.masks import causal  # noqa: E402


def product_rule_forwards(conf: list[float], block: int, tau: float) -> int:
    """Forwards to commit `conf`'s tokens block by block under the path-product threshold rule."""
    forwards = 0
    for start in range(0, len(conf), block):
        end, pos = min(start + block, len(conf)), start
        while pos < end:
            forwards += 1
            prod, pos = conf[pos], pos + 1  # the first masked position commits (threshold or forced)
            while pos < end and prod * conf[pos] >= tau:
                prod, pos = prod * conf[pos], pos + 1
    return forwards


@torch.no_grad()
def greedy_confidences(model, tok, prefixes: list[list[int]], n: int) -> tuple[list[list[float]], int]:
    """Each prefix's greedy continuation (up to n tokens, through EOS) and the probability of each of its
    tokens from one uncached forward; also how many tokens that forward's argmax disagrees on."""
    ar = ARDecoder(model, tok, max_len=max(map(len, prefixes)) + n + 1)
    confs, disagree = [], 0
    for p in prefixes:
        ids = ar.generate_ids([p], ARConfig(max_new_tokens=n))[0].token_ids
        x = torch.tensor([p + ids])
        T = x.shape[1]
        logits = model(x, torch.arange(T)[None], causal(T)[None])[0, len(p) - 1:T - 1]  # [len(ids), V]
        probs = logits[:, :tok.vocab_size].float().softmax(-1)  # the ids the decoder may emit (ar.py bans the rest)
        y = torch.tensor(ids)
        confs.append(probs[torch.arange(len(ids)), y].tolist())
        disagree += int((probs.argmax(-1) != y).sum())
    return confs, disagree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ar", required=True)
    ap.add_argument("--corpus", required=True, help="the corpus directory (tokens.safetensors: code_heldout)")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32, help="greedy tokens per window")
    ap.add_argument("--window-block", type=int, default=4, help="convert_eval.py's --block: its windows are "
                    "context + block long, and this script cuts the same windows to their first `context` tokens")
    ap.add_argument("--blocks", default="4,16")
    ap.add_argument("--thresholds", default="0.9,0.7,0.5,0.3")
    ap.add_argument("--first", type=int, default=8, help="also report TPF over the first N windows (convert_eval.py's "
                    "free run uses the first --free-prompts of the same windows)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    taus, blocks = [float(t) for t in args.thresholds.split(",")], [int(b) for b in args.blocks.split(",")]
    if not all(0 < t <= 1 for t in taus) or min(blocks) < 1 or not 1 <= args.first <= args.windows:
        ap.error(f"need thresholds in (0, 1] (got {taus}), blocks >= 1 (got {blocks}) and 1 <= --first <= "
                 f"--windows (got {args.first}, {args.windows})")
    from safetensors.torch import load_file

    torch.set_num_threads(args.threads)
    model, tok, _ = load_checkpoint(args.ar)
    model.eval()
    stream = load_file(Path(args.corpus) / "tokens.safetensors")["code_heldout"]
    rows = held_out_rows(stream, args.windows, args.context + args.window_block, getattr(tok, "bos_id", None))
    confs, disagree = greedy_confidences(model, tok, [r[:args.context] for r in rows], args.tokens)
    n_tok = sum(map(len, confs))
    flat = [c for cs in confs for c in cs]

    def tpf(cs_list):  # a ratio of sums: all tokens / all forwards
        return {b: {t: sum(map(len, cs_list)) / sum(product_rule_forwards(cs, b, t) for cs in cs_list)
                    for t in taus} for b in blocks}

    out = {"ar": args.ar, "windows": args.windows, "context": args.context, "tokens": n_tok,
           "argmax_disagreements": disagree,
           "share_at_least": {t: sum(c >= t for c in flat) / n_tok for t in taus},
           "tpf": tpf(confs), f"tpf_first_{args.first}": tpf(confs[:args.first]),
           "confidences": [[round(c, 6) for c in cs] for cs in confs]}
    emit(out, args.out)


if __name__ == "__main__":
    main()
