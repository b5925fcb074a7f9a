"""Session 48: what a drafter's split forward costs on one CPU core, and whether a one-op form of the split helps.

orl.model.row_split runs each weight unit twice per fused forward (the verifier's weights on the clean rows, the
drafter's on the draft rows). This times the model forward alone (no decoder around it, medians of 200 after 20
warm-up) on a fused round's shape (33 rows, the first 9 clean): the plain verifier at 1 / 9 / 33 / 66 rows, the split
model as shipped ("slice": a slice, two unit calls and a cat per unit) and a prototype "select" form (one call on
the two units' weights stacked, then a per-row torch.where: Linear and Embedding on [W_clean; W_draft], RMSNorm
with a per-row weight), which trades the second set of calls for twice the FLOPs. Checks the select form's tokens
against the shipped form's on 24 prompts.

    OMP_NUM_THREADS=1 python docs/results-lengths/s48/split_forward.py
"""
import time

import torch
import torch.nn.functional as F
from torch import nn

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig
from orl.eval.runner import make_samples
from orl.model.residual import RMSNorm
from orl.model.row_split import RowSplit, draft_rows_from
from orl.verifier import drafter_decoder

torch.set_num_threads(1)


class Select(nn.Module):
    """One RowSplit unit (Linear, Embedding or RMSNorm without unit offset) as one call plus a row select."""

    def __init__(self, rs: RowSplit):
        super().__init__()
        self.rs, self.cut = rs, rs.cut
        c, d = rs.clean, rs.draft
        self.kind = "linear" if isinstance(c, nn.Linear) else "embedding" if isinstance(c, nn.Embedding) else "norm"
        if self.kind == "norm" and (c.unit_offset or c.fp32_scale or c.weight is None):
            raise ValueError("the prototype covers Llama/Qwen-order RMSNorm only")
        self.w2 = torch.cat([c.weight, d.weight], 0).detach() if self.kind != "norm" else None
        self.wc, self.wd = c.weight.detach(), d.weight.detach()

    @property
    def weight(self):
        return self.rs.clean.weight

    def forward(self, x):
        c = self.cut.at
        if c is None or c >= x.shape[1]:
            return self.rs.clean(x)
        n = x.shape[1]
        draft = torch.arange(n) >= c                                                   # [N]
        if self.kind == "linear":
            y = F.linear(x, self.w2)                                                   # [B, N, 2 out]
            out = self.wc.shape[0]
            return torch.where(draft[:, None], y[..., out:], y[..., :out])
        if self.kind == "embedding":
            return F.embedding(x + draft.long() * self.wc.shape[0], self.w2)
        w = torch.where(draft.view(n, *(1,) * (x.dim() - 2)), self.wd, self.wc)        # [N, (1,) d]
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.rs.clean.eps) * w).to(x.dtype)


def to_select(module: nn.Module) -> None:
    for name, child in list(module.named_children()):
        if isinstance(child, RowSplit) and isinstance(child.clean, (nn.Linear, nn.Embedding, RMSNorm)):
            setattr(module, name, Select(child))
        else:
            to_select(child)


def median_ms(model, n: int, cut: int, reps: int = 200) -> float:
    x = torch.randint(0, 100, (1, n))
    pos, mask = torch.arange(n)[None], torch.ones(1, n, n, dtype=torch.bool)
    ts = []
    with torch.no_grad(), draft_rows_from(model, cut):
        for _ in range(reps + 20):
            t = time.perf_counter()
            model(x, pos, mask)
            ts.append(time.perf_counter() - t)
    ts = sorted(ts[20:])
    return 1e3 * ts[len(ts) // 2]


def main():
    plain = load_checkpoint("checkpoints/orl-tiny7-ar")[0]
    sliced = drafter_decoder("checkpoints/orl-tiny7-ardraft")
    selected = drafter_decoder("checkpoints/orl-tiny7-ardraft")
    to_select(selected.model)
    print("| forward, one CPU thread | ms (median of 200) |\n|---|---:|")
    for n in (1, 9, 33, 66):
        print(f"| verifier alone, {n} rows | {median_ms(plain, n, n):.2f} |")
    print(f"| split as shipped (slice), 33 rows, 9 clean | {median_ms(sliced.model, 33, 9):.2f} |")
    print(f"| split, select prototype, 33 rows, 9 clean | {median_ms(selected.model, 33, 9):.2f} |")
    prompts = [s.prompt for t in ("long7xp", "keysort7x", "prog7xp") for s in make_samples(t, "heldout", 8, 0)]
    cfg = ARConfig(max_new_tokens=112, spec_tokens=8, spec_draft="fused", spec_groups=3)
    same = sum(sliced.generate(p, cfg)[0].token_ids == selected.generate(p, cfg)[0].token_ids for p in prompts)
    print(f"\nselect vs slice: identical tokens on {same} of {len(prompts)} prompts")


if __name__ == "__main__":
    main()
