"""Routed experts (DESIGN section 2): one router, two equal ways to run the chosen experts.

Router: softmax scores (Qwen3-MoE), sigmoid scores (LLaDA2, DeepSeek-V3 style) or "gemma4" (softmax
over a scale-free-normed, learned-scaled input, top-k renormalised, then times a per-expert scale). The sigmoid router
chooses with `scores + expert_bias` (a load-balancing buffer that moves the choice, never the weights),
optionally only among the `topk_group` groups whose best two scores are highest; the weights are the
chosen unbiased scores, normalised and times `routed_scaling`. Router logits are fp32 (LLaDA2's
router_dtype), the softmax router keeps Qwen3-MoE's order (logits in the model dtype, softmax in fp32).

Experts, given (top_i, top_w) [N, k]:
  grouped  tokens sorted by expert, three torch._grouped_mm calls over the N*k (token, expert) pairs:
           cost proportional to the experts chosen. Offsets stay on the device (counts by scatter_add,
           cumsum), so there is no host sync and the shapes are static ([N*k, ...]) for CUDA graphs.
           It needs the experts' weights stacked, [E, 2I, D] (gate | up) and [E, D, I]: `pack` stacks
           them once and makes every expert's nn.Linear weight a view into the stack, so the per-expert
           names (checkpoints, quantization, tests) stay and there is no second copy.
  dense    every expert on every token, weighted by the (mostly zero) routing weights: the reference,
           and the path while gradients are recorded (torch._grouped_mm has no CPU backward in 2.13),
           for quantized experts, or where the kernel's 16-byte stride rule does not hold.
Why _grouped_mm rather than a fixed capacity per expert: a capacity below N tokens can drop tokens
(no longer equal to the dense form), and a capacity of N costs what the dense form costs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from orl.model.args import ModelArgs
from orl.model.mlp import ACTIVATIONS, MLP
from orl.model.residual import RMSNorm

GROUPED_DTYPES = {"cpu": (torch.float32, torch.bfloat16, torch.float16), "cuda": (torch.bfloat16,)}


class Router(nn.Linear):
    """Called, the router logits [N, E] (an nn.Linear: its init, and orl.quant leaves it alone since it
    swaps exact nn.Linear only); `route(x)` [N, D] -> (top_w [N, k] fp32, top_i [N, k]).
    Parameter names: gate.weight, gate.expert_bias; gemma4 also gate.scale [D], gate.per_expert_scale [E]."""

    def __init__(self, args: ModelArgs):
        super().__init__(args.dim, args.n_experts, bias=False)
        self.k, self.norm = args.n_experts_per_tok, args.norm_topk_prob
        self.sigmoid, self.routed_scale = args.router == "sigmoid", args.routed_scaling
        self.n_group, self.topk_group = args.n_group, args.topk_group
        if args.router_bias:
            self.register_buffer("expert_bias", torch.zeros(args.n_experts))
        else:
            self.expert_bias = None
        self.gemma4 = args.router == "gemma4"
        if self.gemma4:
            self.prenorm = RMSNorm(args.dim, args.norm_eps, with_scale=False)
            self.scale = nn.Parameter(torch.ones(args.dim))
            self.per_expert_scale = nn.Parameter(torch.ones(args.n_experts))

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.gemma4:  # the input's scale is learned, not the residual stream's
            x = self.prenorm(x) * self.scale * self.in_features ** -0.5
        if self.sigmoid:
            scores = F.linear(x.float(), self.weight.float()).sigmoid()
        else:
            scores = F.softmax(F.linear(x, self.weight), dim=-1, dtype=torch.float)
        choice = scores if self.expert_bias is None else scores + self.expert_bias.float()
        if self.n_group > 1:
            choice = self._best_groups(choice)
        top_i = choice.topk(self.k, dim=-1).indices
        top_w = scores.gather(-1, top_i)
        if self.norm and (self.k > 1 or not self.sigmoid):
            # sigmoid: LLaDA2 normalises only when k > 1 and adds 1e-20; softmax: Qwen3-MoE's norm_topk_prob
            top_w = top_w / (top_w.sum(-1, keepdim=True) + (1e-20 if self.sigmoid else 0.0))
        if self.gemma4:
            return top_w * self.per_expert_scale[top_i], top_i
        return top_w * self.routed_scale, top_i

    def _best_groups(self, choice: Tensor) -> Tensor:
        """-inf outside the topk_group groups whose two best scores sum highest."""
        N, E = choice.shape
        groups = choice.view(N, self.n_group, E // self.n_group)
        group_score = groups.topk(2, dim=-1).values.sum(-1)  # [N, G]
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, group_score.topk(self.topk_group, dim=-1).indices, True)
        return groups.masked_fill(~keep[..., None], float("-inf")).view(N, E)


class MoE(nn.Module):
    """Top-k routed experts (+ an optional shared expert every token goes through)."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.k, self.act = args.n_experts_per_tok, ACTIVATIONS[args.hidden_act]
        self.gate = Router(args)
        self.experts = nn.ModuleList(MLP(args.dim, args.moe_ffn_dim, args.hidden_act) for _ in range(args.n_experts))
        self.shared_expert = MLP(args.dim, args.shared_expert_ffn_dim, args.hidden_act) if args.shared_expert_ffn_dim else None
        self.grouped = hasattr(torch, "_grouped_mm")  # False: always the dense form (benchmarks compare)
        self._packed: tuple[Tensor, Tensor] | None = None
        self._packed_params: tuple = ()
        self.pack()
        # loading assigns new per-expert tensors (assign=True) or copies into the views (in place):
        # re-stack after either, so the grouped path never reads stale weights
        self.register_load_state_dict_post_hook(lambda module, incompatible: module.pack())

    def forward(self, x: Tensor, route_from: Tensor | None = None) -> Tensor:
        """x [..., D] the experts' input; route_from [..., D] the router's when it differs (Gemma 4 routes
        on the residual stream and feeds the experts its normed copy)."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        top_w, top_i = self.gate.route(x if route_from is None else route_from.reshape(-1, shape[-1]))
        if self._can_group(x):
            out = self._grouped(x, top_w, top_i)
        else:
            out = self.dense(x, top_w, top_i)
        if self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out.view(shape)

    def dense(self, x: Tensor, top_w: Tensor, top_i: Tensor) -> Tensor:
        """The all-experts form: the reference the grouped form equals."""
        w = torch.zeros(x.shape[0], len(self.experts), device=x.device).scatter(-1, top_i, top_w).to(x.dtype)
        return sum(w[:, e, None] * expert(x) for e, expert in enumerate(self.experts))

    def _grouped(self, x: Tensor, top_w: Tensor, top_i: Tensor) -> Tensor:
        gate_up, down = self._packed
        E, I = down.shape[0], down.shape[2]
        flat = top_i.reshape(-1)                          # [N*k] expert of each (token, slot) pair
        order = flat.argsort(stable=True)
        token = order // self.k
        counts = torch.zeros(E, dtype=torch.int32, device=x.device).scatter_add_(
            0, flat, torch.ones_like(flat, dtype=torch.int32))
        offs = counts.cumsum(0, dtype=torch.int32)
        h = torch._grouped_mm(x[token], gate_up.transpose(1, 2), offs=offs)  # [N*k, 2I]
        h = self.act(h[:, :I]) * h[:, I:]
        y = torch._grouped_mm(h, down.transpose(1, 2), offs=offs)            # [N*k, D]
        y = y * top_w.reshape(-1)[order, None].to(y.dtype)
        return torch.zeros_like(x).index_add_(0, token, y)

    # ---------------------------------------------------------------- packed weights

    def _weights(self) -> tuple:
        return tuple(getattr(getattr(e, n), "weight", None) for e in self.experts
                     for n in ("gate_proj", "up_proj", "down_proj"))

    def _can_group(self, x: Tensor) -> bool:
        if not self.grouped or self._packed is None or torch.is_grad_enabled():
            return False
        if x.dtype not in GROUPED_DTYPES.get(x.device.type, ()) or self._packed[0].device != x.device:
            return False
        # quantization or a manual assignment replaced an expert's weight: the stack no longer is the model
        return all(a is b for a, b in zip(self._weights(), self._packed_params))

    def pack(self) -> None:
        """Stack the experts' weights ([E, 2I, D] gate|up, [E, D, I] down) and make each expert's
        weight a view into the stack (same Parameter objects, so optimizers keep them)."""
        ws = self._weights()
        if any(not isinstance(w, nn.Parameter) or w.dtype != ws[0].dtype for w in ws):
            self._packed, self._packed_params = None, ()
            return
        gates, ups, downs = ws[0::3], ws[1::3], ws[2::3]
        with torch.no_grad():
            gate_up = torch.stack([torch.cat([g, u]) for g, u in zip(gates, ups)])
            down = torch.stack(list(downs))
            I = gates[0].shape[0]
            for e in range(len(self.experts)):
                gates[e].data, ups[e].data, downs[e].data = gate_up[e, :I], gate_up[e, I:], down[e]
        es = gate_up.element_size()
        aligned = (gate_up.shape[2] * es) % 16 == 0 and (I * es) % 16 == 0  # _grouped_mm's stride rule
        self._packed = (gate_up, down) if aligned else None
        self._packed_params = ws if aligned else ()

    def _apply(self, fn, recurse: bool = True):
        """.to() / .cuda() / .half() give the experts new storage: re-stack unless they still alias it."""
        out = super()._apply(fn, recurse)
        if self._packed is None or not self._still_views():
            self.pack()
        return out

    def _still_views(self) -> bool:
        gate_up, down = self._packed
        ptrs = {gate_up.untyped_storage().data_ptr(), down.untyped_storage().data_ptr()}
        return all(w is not None and w.untyped_storage().data_ptr() in ptrs for w in self._weights())
