"""The decoders benchmarks/scale.py times at one shape, one row each: dlmrt (forced tokens per
forward), the prefix-cache loop of orl/eval/peers.py and transformers' AR generate, with the
timing fields every row shares."""
from __future__ import annotations

import math
import statistics
import time

import torch

from orl.engine import DecodeConfig, Engine
from orl.eval.peers import prefix_cache
from orl.quant import linear_paths
from scale_shapes import IdsOnly, kv_bytes, weight_bytes_per_forward, weight_bytes_per_forward_hf


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(xs) -> float:
    return statistics.median(xs)


def row(shape: str, kw: dict, peer: str, form: str, **fields) -> dict:
    return {"shape": shape, "layers": kw["n_layers"], "peer": peer, "form": form, **fields}


def timing_fields(tokens: int, forwards: int, total_s: float, prefill_s: float, per_fwd_bytes: int, bw: float) -> dict:
    ms_fwd = (total_s - prefill_s) / forwards * 1e3
    return {"tokens": tokens, "forwards": forwards, "tpf": tokens / forwards, "tok_s": tokens / total_s,
            "fwd_s": 1e3 / ms_fwd, "ms_fwd": ms_fwd, "mb_fwd": per_fwd_bytes / 1e6,
            "roofline": per_fwd_bytes / bw * 1e3 / ms_fwd, "prefill_ms": prefill_s * 1e3}


def dlmrt_rows(shape, kw, model, form, prompt, args, device, bw, tpfs) -> list[dict]:
    tok = IdsOnly(kw["vocab_size"])
    max_len = args.prompt_len + args.new_tokens
    eng = Engine(model, tok, max_len=max_len)
    per_fwd = weight_bytes_per_forward(model) + kv_bytes(kw, max_len, model.lm_head.weight.dtype)
    paths = ",".join(linear_paths(model, model.lm_head.weight.dtype)) or "dense"
    rows, L = [], args.block_len
    for k in tpfs:
        # one chunk length for every k (a divisor of every L / k here), so every k replays the graphs
        # captured for the first: the commit schedule lives in a device buffer (DeviceKnobs.n_steps)
        chunk = math.gcd(4, L // max(args.tpf + args.moe_tpf + args.quant_tpf))
        cfg = DecodeConfig(block_len=L, max_new_tokens=args.new_tokens, rule="topk", steps_per_block=L // k,
                           chunk_steps=chunk, cuda_graph=device.type == "cuda")
        gens = [eng.generate_ids([prompt], cfg)[0] for _ in range(args.warmup + args.repeats)][args.warmup:]
        g = gens[0]
        total, pre = median([x.total_s for x in gens]), median([x.prefill_s for x in gens])
        rows.append(row(shape, kw, "dlmrt", form, tpf_target=k, paths=f"{paths}, {eng.runner.captures} graphs"
                        if device.type == "cuda" else paths, captures=eng.runner.captures,
                        **timing_fields(g.n_tokens, g.forwards, total, pre, per_fwd, bw)))
    return rows


def prefix_rows(shape, kw, model, form, prompt, args, device, bw) -> list[dict]:
    tok = IdsOnly(kw["vocab_size"])
    banned = (tok.mask_id, tok.eos_id, tok.pad_id)
    per_fwd = weight_bytes_per_forward(model) + kv_bytes(kw, args.prompt_len + args.new_tokens, model.lm_head.weight.dtype)
    runs = [prefix_cache(model, prompt, gen_len=args.new_tokens, block_len=args.block_len,
                         threshold=args.prefix_threshold, mask_id=tok.mask_id, eos_id=tok.eos_id, banned=banned)
            for _ in range(args.warmup + args.repeats)][args.warmup:]
    r = runs[0]
    total, pre = median([x.total_s for x in runs]), median([x.prefill_s for x in runs])
    return [row(shape, kw, "prefix-cache", form, tpf_target=None, paths="eager",
                **timing_fields(r.n_tokens, r.forwards, total, pre, per_fwd, bw))]


def hf_rows(shape, kw, prompt, args, device, dtype, bw) -> list[dict]:
    """transformers' own Qwen3 at the same shape (dense shapes only), random weights."""
    try:
        from transformers import Qwen3Config, Qwen3ForCausalLM
    except ImportError as e:
        return [row(shape, kw, "hf-ar", "base", note=f"skipped: transformers not importable ({e})")]
    if kw.get("n_experts"):
        return [row(shape, kw, "hf-ar", "base", note="skipped: no transformers class for LLaDA2's MoE")]
    max_len = args.prompt_len + args.new_tokens
    cfg = Qwen3Config(vocab_size=kw["vocab_size"], hidden_size=kw["dim"], intermediate_size=kw["ffn_dim"],
                      num_hidden_layers=kw["n_layers"], num_attention_heads=kw["n_heads"],
                      num_key_value_heads=kw["n_kv_heads"], head_dim=kw["head_dim"],
                      tie_word_embeddings=kw["tie_embeddings"], max_position_embeddings=max_len + 8,
                      rope_theta=kw["rope_theta"], rms_norm_eps=kw["norm_eps"])
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            hf = Qwen3ForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(old)
    ids = torch.tensor([prompt], device=device)
    n = args.new_tokens
    kw_gen = dict(attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                  cache_implementation="static", pad_token_id=kw["vocab_size"] - 1, eos_token_id=kw["vocab_size"] - 2)
    graphs_before = _dynamo_graphs()
    walls = []
    with torch.no_grad():
        for i in range(args.warmup + args.repeats):
            sync(device)
            t0 = time.perf_counter()
            out = hf.generate(ids, **kw_gen)
            sync(device)
            if i >= args.warmup:
                walls.append(time.perf_counter() - t0)
    compiled = _dynamo_graphs() > graphs_before
    tokens = out.shape[1] - ids.shape[1]
    per_fwd = weight_bytes_per_forward_hf(hf) + kv_bytes(kw, max_len, dtype)
    wall = median(walls)
    # one forward per token, the prefill's included (it yields the first token): prefill_s = 0
    fields = timing_fields(tokens, tokens, wall, 0.0, per_fwd, bw)
    del hf
    return [row(shape, kw, "hf-ar-compiled" if compiled else "hf-ar", "base", tpf_target=1,
                paths="torch.compile" if compiled else "eager", **fields)]


def _dynamo_graphs() -> int:
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # counters moved: report "not compiled" rather than fail the table
        return 0
