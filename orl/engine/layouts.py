"""Block layouts of the engine (DESIGN section 2): where a request's blocks lie in the cache slots.

  prompt_block   the prompt is block 0 (bidirectional over itself), answer block j is block j + 1 and
                 starts at slot P + j L (P: the longest prompt; shorter ones are left padded).
  absolute_grid  SDAR, TraDo, LLaDA2, Fast-dLLM v2: block = position // L from position 0. The prompt's
                 complete blocks are prefilled block-causally; its last, partial block (the "tail")
                 opens the first canvas as fixed tokens, never masked, and the canvas completes it.
                 Rows are left padded by whole blocks (by the longest run of complete blocks), so the
                 grid's boundaries fall on the same slots in every row and the canvas stays one
                 [B, L] window: row b's RoPE positions are slot - pad_b with pad_b a multiple of L.
The plan is host-side and made once per request; the device sees it as the prompt slots' block ids,
each row's fixed tail tokens and the valid slots.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

LAYOUTS = ("prompt_block", "absolute_grid")


@dataclass
class Plan:
    prefill: list[list[int]]   # per row, the tokens prefilled before the first canvas
    tails: list[list[int]]     # per row, prompt tokens that open the first canvas (absolute grid)
    lengths: list[int]         # per row, the whole prompt's length
    n_blocks: int              # canvases the longest answer needs
    shift: int = 0             # extra left padding of every row (a captured prefill's length bucket)

    @property
    def P(self) -> int:
        """The slot where the first canvas starts (the padded prefill length)."""
        return max((len(p) for p in self.prefill), default=0) + self.shift  # no prompts: check_request names it

    def pads(self) -> list[int]:
        return [self.P - len(p) for p in self.prefill]

    def answer_slots(self, max_new_tokens: int) -> list[tuple[int, int]]:
        """Per row, the slots [first, end) of its answer."""
        return [(pad + n, pad + n + max_new_tokens) for pad, n in zip(self.pads(), self.lengths)]

    def last_blocks(self, L: int, max_new_tokens: int) -> list[int]:
        """Per row, the block that holds its last answer slot: on the absolute grid rows with shorter prompt
        tails end their answers blocks before the longest, and take no part in the blocks after."""
        return [(e - 1 - self.P) // L for _, e in self.answer_slots(max_new_tokens)]

    def block_span(self, j: int, L: int, max_new_tokens: int) -> list[tuple[int, int]]:
        """Per row, the canvas indices [lo, hi) of block j that hold its answer (empty: lo == hi)."""
        start = self.P + j * L
        return [(min(max(a - start, 0), L), min(max(e - start, 0), L)) for a, e in self.answer_slots(max_new_tokens)]


def plan(prompt_ids: list[list[int]], layout: str, L: int, max_new_tokens: int) -> Plan:
    lengths = [len(p) for p in prompt_ids]
    if layout == "prompt_block":
        return Plan([list(p) for p in prompt_ids], [[] for _ in prompt_ids], lengths, -(-max_new_tokens // L))
    if layout != "absolute_grid":
        raise ValueError(f"unknown layout {layout!r}; the block engine runs {LAYOUTS}")
    cut = [n // L * L for n in lengths]
    tails = [list(p[c:]) for p, c in zip(prompt_ids, cut)]
    n_blocks = max(-(-(len(t) + max_new_tokens) // L) for t in tails)
    return Plan([list(p[:c]) for p, c in zip(prompt_ids, cut)], tails, lengths, n_blocks)


def prompt_blocks(layout: str, S: int, P: int, L: int, device) -> Tensor:
    """[S] block id of every prompt slot: 0 for the prompt block; slot // L - P // L (negative, in grid
    order before the first canvas's block 1) on the absolute grid. Only the order matters to the mask."""
    slot = torch.arange(S, device=device)
    return slot // L - P // L if layout == "absolute_grid" else torch.zeros_like(slot)


def first_canvas(p: Plan, L: int, device) -> tuple[Tensor, Tensor]:
    """(tokens [B, L], fixed [B, L] bool): each row's prompt tail at the start of the first canvas."""
    tokens = torch.zeros(len(p.tails), L, dtype=torch.long)
    fixed = torch.zeros(len(p.tails), L, dtype=torch.bool)
    for b, tail in enumerate(p.tails):
        tokens[b, :len(tail)] = torch.tensor(tail, dtype=torch.long)
        fixed[b, :len(tail)] = True
    return tokens.to(device), fixed.to(device)
