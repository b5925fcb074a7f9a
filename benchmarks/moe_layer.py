"""One LLaDA2.0-mini-shaped MoE layer: the grouped form (orl.model.moe, torch._grouped_mm over the chosen
(token, expert) pairs) against the all-experts form (every expert on every token, the reference).

Shape (LLaDA2.0-mini config.json): hidden 2048, 256 experts of 512, top-8 chosen in 4 of 8 groups,
one shared expert, sigmoid router with expert_bias, routed_scaling_factor 2.5. Random weights,
no_grad, the tokens of one or a few 32-token blocks. Prints a table and one JSON line per token count.

    .venv/bin/python benchmarks/moe_layer.py --tokens 32 128 --dtype bfloat16 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from orl.model.args import ModelArgs
from orl.model.moe import MoE

MINI = dict(vocab_size=8, dim=2048, n_layers=1, n_heads=16, n_kv_heads=4, head_dim=128, ffn_dim=5120,
            n_experts=256, n_experts_per_tok=8, moe_ffn_dim=512, shared_expert_ffn_dim=512, router="sigmoid",
            router_bias=True, n_group=8, topk_group=4, routed_scaling=2.5, norm_topk_prob=True)


def build(dtype: torch.dtype, experts: int) -> MoE:
    args = ModelArgs(**{**MINI, "n_experts": experts, "n_group": min(8, experts // 2)})
    with torch.device("meta"):
        moe = MoE(args).to(dtype)
    moe = moe.to_empty(device="cpu").eval()  # allocates in dtype; _apply re-stacks the experts
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in moe.named_parameters():
            if ".experts." in name:
                continue  # views into the stacks, filled below in one go
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        for stacked in moe._packed:
            stacked.copy_(torch.randn(stacked.shape, generator=g) * 0.02)
        moe.gate.expert_bias.copy_(torch.randn(experts, generator=g) * 0.01)
    return moe


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    out = fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[32])
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    moe = build(dtype, a.experts)
    print(f"# MoE layer dim {MINI['dim']}, {a.experts} experts x {MINI['moe_ffn_dim']}, top-{MINI['n_experts_per_tok']}, "
          f"{a.dtype}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'tokens':>7} {'grouped ms':>11} {'all-experts ms':>15} {'speed-up':>9} {'max |diff| / max |y|':>21}")
    for n in a.tokens:
        x = torch.randn(n, MINI["dim"], generator=torch.Generator().manual_seed(n)).to(dtype)
        with torch.no_grad():
            assert moe._can_group(x)
            top = moe.gate.route(x)
            t_group, y_group = timed(lambda: moe._grouped(x, *top), a.repeats)
            t_dense, y_dense = timed(lambda: moe.dense(x, *top), a.repeats)
        diff = ((y_group.float() - y_dense.float()).abs().max() / y_dense.float().abs().max()).item()
        print(f"{n:>7} {t_group * 1e3:>11.1f} {t_dense * 1e3:>15.1f} {t_dense / t_group:>8.1f}x {diff:>21.2e}")
        print(json.dumps({"tokens": n, "dtype": a.dtype, "experts": a.experts, "grouped_s": t_group,
                          "all_experts_s": t_dense, "max_rel_diff": diff}))


if __name__ == "__main__":
    main()
