"""Batch-1 CPU speed of Gemma 3 270M (the `gemma` extra's Q4_K_M GGUF): orl's AR decoder against
transformers' generate, side by side in one run (docs/BENCHMARKS.md).

Both decode greedily in fp32 from the same dequantized weights (orl: `orl fetch gemma-3-270m`;
transformers: the GGUF file itself, which it dequantizes to fp32 Linear layers on CPU), so both emit
the same tokens and tokens/s compare like for like: new tokens / wall time of the whole request
(prefill included), median of --repeats runs after one warm-up, the two sides interleaved so that
machine noise hits both. llama.cpp (llama-cpp-python) is not in the table: PyPI has no wheel of it
for this machine, only a source build of llama.cpp.

    .venv/bin/python benchmarks/gemma_cpu.py --prompt-lens 64,128,256,512 --new 128 --repeats 3
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch


def prompt_of(tok, n: int) -> list[int]:
    """n tokens of real Python source (offline, the same on every machine): BOS + the stdlib's text."""
    import argparse as src_module

    ids = tok.encode(inspect.getsource(src_module))
    if len(ids) < n:
        raise ValueError(f"source text has only {len(ids)} tokens, {n} asked")
    return ids[:n]


def timed(fn) -> tuple[float, list[int]]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-lens", default="64,128,256,512")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs per side before each row")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--hf-from-dir", action="store_true",
                    help="load transformers from orl's imported directory instead of the GGUF (same weights, faster)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers

    from orl.checkpoint import load_checkpoint
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.fetch import fetch, gguf_path

    d = fetch("gemma-3-270m")
    ours, tok, _ = load_checkpoint(d)
    if args.hf_from_dir:
        hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    else:
        g = gguf_path("gemma-3-270m")
        hf = transformers.AutoModelForCausalLM.from_pretrained(g.parent, gguf_file=g.name, dtype=torch.float32).eval()
    cfg = ARConfig(max_new_tokens=args.new)

    def run_ours(ids):
        dec = ARDecoder(ours, tok, max_len=len(ids) + args.new)
        return dec.generate_ids([ids], cfg)[0].token_ids

    @torch.no_grad()
    def run_hf(ids):
        out = hf.generate(torch.tensor([ids]), max_new_tokens=args.new, do_sample=False)[0, len(ids):].tolist()
        return out[: out.index(tok.eos_id) + 1] if tok.eos_id in out else out

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}, "
          f"{args.new} new tokens, batch 1, fp32, median of {args.repeats} after {args.warmup} warm-up")
    print("| prompt tokens | orl AR tok/s | transformers tok/s | orl / transformers | same tokens |")
    print("|---:|---:|---:|---:|:---:|")
    for n in [int(x) for x in args.prompt_lens.split(",")]:
        ids = prompt_of(tok, n)
        for _ in range(args.warmup):
            run_ours(ids), run_hf(ids)
        ours_t, hf_t, same = [], [], True
        for _ in range(args.repeats):
            t, a = timed(lambda: run_ours(ids))
            ours_t.append(len(a) / t)
            t, b = timed(lambda: run_hf(ids))
            hf_t.append(len(b) / t)
            same &= a == b
        o, h = statistics.median(ours_t), statistics.median(hf_t)
        print(f"| {n} | {o:.1f} | {h:.1f} | {o / h:.2f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
