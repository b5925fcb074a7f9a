"""Traces: per denoising step, what the step consumed and what it decided (DESIGN section 3).

Training rollouts replay these states (canvas + the exact residual z / a consumed), and the web page
animates them. Recording only copies tensors that the step computes anyway, so it cannot change
the tokens produced.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class StepRecord:
    block: int            # answer block index (0-based)
    step: int             # denoising step within the block (0-based)
    canvas: Tensor        # [L] input tokens of the step (mask where unresolved)
    unresolved: Tensor    # [L] bool, input
    z: Tensor | None      # [L, D] soft embedding consumed (None when residual is off)
    a: Tensor | None      # [L] normalised entropy consumed (RCD mode)
    tokens: Tensor        # [L] token proposed at every position
    confidence: Tensor    # [L] p(proposed token)
    entropy: Tensor       # [L] entropy of the step's distribution (nats)
    committed: Tensor     # [L] bool, positions fixed by this step (llada21: or re-edited)

    def to_dict(self, tokenizer=None) -> dict:
        d = {"block": self.block, "step": self.step, "canvas": self.canvas.tolist(),
             "unresolved": self.unresolved.tolist(), "tokens": self.tokens.tolist(),
             "confidence": [round(c, 4) for c in self.confidence.tolist()],
             "entropy": [round(e, 4) for e in self.entropy.tolist()], "committed": self.committed.tolist()}
        if tokenizer is not None:
            d["canvas_text"] = [tokenizer.token_str(t) for t in d["canvas"]]
            d["tokens_text"] = [tokenizer.token_str(t) for t in d["tokens"]]
        return d


class TraceRecorder:
    """Collects batch-level step snapshots, then splits them per row."""

    def __init__(self, batch: int, keep_residual: bool):
        self.rows: list[list[StepRecord]] = [[] for _ in range(batch)]
        self.keep_residual = keep_residual
        self._inputs: dict[str, Tensor] = {}

    def before(self, st) -> None:
        self._inputs = {"canvas": st.canvas.cpu().clone(), "unresolved": st.unresolved.cpu().clone(),
                        "open": st.open.cpu().clone()}
        if self.keep_residual:
            self._inputs["z"] = st.z.detach().cpu().clone()
            self._inputs["a"] = st.a.detach().cpu().clone()

    def after(self, st, block: int) -> None:
        inp = self._inputs
        out = {k: getattr(st, f"last_{k}").cpu().clone() for k in ("x", "conf", "entropy", "commit")}
        steps = st.steps.cpu()
        for b, rows in enumerate(self.rows):
            if not (bool(inp["unresolved"][b].any()) or bool(inp["open"][b])):
                continue  # the row's block was already done (llada21: also its edit-only steps): a no-op for it
            rows.append(StepRecord(
                block=block, step=int(steps[b]) - 1, canvas=inp["canvas"][b], unresolved=inp["unresolved"][b],
                z=inp["z"][b] if self.keep_residual else None, a=inp["a"][b] if self.keep_residual else None,
                tokens=out["x"][b], confidence=out["conf"][b], entropy=out["entropy"][b],
                committed=out["commit"][b]))
