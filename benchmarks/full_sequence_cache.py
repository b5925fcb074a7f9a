"""How far Fast-dLLM v1's prefix / dual caches (DecodeConfig.full_sequence_cache) drift from the exact
full-sequence decoding, and what they save, on a checkpoint's held-out task prompts.

Every mode decodes the same prompts (one batch, greedy, layout full_sequence, the topk rule with
--steps-per-block steps per window); reported per mode: answer-token agreement with the exact mode
(positions where both answers hold the same token / positions either answer has), answers identical to
the exact ones, the task verifier's accuracy, and wall time. On CPU, one thread by default.

    .venv/bin/python benchmarks/full_sequence_cache.py --model checkpoints/orl-tiny-base --task prog
"""
from __future__ import annotations

import argparse
import time

import torch

from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.eval.tasks import get_task


def agreement(a: list[int], b: list[int]) -> tuple[int, int]:
    n = max(len(a), len(b))
    return sum(i < len(a) and i < len(b) and a[i] == b[i] for i in range(n)), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", default="prog")
    ap.add_argument("--n", type=int, default=64, help="held-out prompts")
    ap.add_argument("--block-len", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--steps-per-block", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, manifest = load_checkpoint(args.model, device="cpu")
    engine = Engine(model, tok, manifest=manifest)
    task = get_task(args.task)
    samples = [task.sample("heldout", i) for i in range(args.n)]
    prompts = [s.prompt for s in samples]
    out = {}
    for mode in ("none", "prefix", "dual"):
        cfg = DecodeConfig.from_manifest(manifest, layout="full_sequence", full_sequence_cache=mode, rule="topk",
                                         block_len=args.block_len, max_new_tokens=args.max_new_tokens,
                                         steps_per_block=args.steps_per_block)
        t = time.perf_counter()
        gens = engine.generate(prompts, cfg)
        seconds = time.perf_counter() - t
        acc = sum(task.verify(s.prompt, g.text) for s, g in zip(samples, gens)) / len(samples)
        out[mode] = gens
        same, total = map(sum, zip(*(agreement(a.token_ids, b.token_ids) for a, b in zip(out["none"], gens))))
        rows = sum(a.token_ids == b.token_ids for a, b in zip(out["none"], gens))
        print(f"{mode:6s}  agreement {same}/{total} = {same / total:.3f}  identical answers {rows}/{len(gens)}  "
              f"accuracy {acc:.3f}  wall {seconds:.1f}s")


if __name__ == "__main__":
    main()
