"""Oracle decoding: the TPF a perfectly calibrated model reaches under the threshold rule.

Given every valid answer to a prompt and its probability under the training distribution, the exact
marginal of each unresolved position given the committed ones is the probability mass of the answers
that agree with the canvas. `oracle_decode` runs the engine's block loop on those marginals (commit
every position with p_max >= tau, at least the most confident one, lowest position on ties; resolve
positions after a committed EOS to EOS; one commit forward between blocks, DESIGN section 5) and
counts forwards. A model trained to convergence on the family's references cannot be more confident
than these marginals without being wrong, so this is the TPF a well-trained base reaches on a family
with many valid answers (a trained base's `constr` TPF at 0.9 matches it: docs/history/CODE-NOTES.md),
and the ceiling of that TPF on a single-answer family is the plain TPF ceiling.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OracleResult:
    tokens: tuple  # committed answer up to and including the first EOS
    n_tokens: int
    forwards: int  # denoising + commit forwards
    valid: bool  # the committed answer is one of the given answers

    @property
    def tpf(self) -> float:
        return self.n_tokens / self.forwards


def oracle_decode(answers: Mapping[Sequence, float], eos, tau: float = 0.9, block_len: int = 16) -> OracleResult:
    """answers: answer token sequence (without EOS) -> probability (normalised here). eos: the EOS token."""
    if not answers or min(answers.values()) < 0 or sum(answers.values()) <= 0:
        raise ValueError("oracle_decode needs at least one answer and non-negative probabilities with a positive sum")
    if not 0 < tau <= 1 or block_len < 1:
        raise ValueError(f"need 0 < tau <= 1 and block_len >= 1, got {tau}, {block_len}")
    width = math.ceil((max(len(a) for a in answers) + 1) / block_len) * block_len
    padded = {tuple(a) + (eos,) * (width - len(a)): p for a, p in answers.items() if p > 0}
    canvas: list = [None] * width
    forwards = 0
    for lo in range(0, width, block_len):
        if lo:
            forwards += 1  # the commit forward that writes the finished block into the KV cache
        hi = lo + block_len
        while any(c is None for c in canvas[lo:hi]):
            forwards += 1
            # Commits in one step can be jointly inconsistent at low thresholds (two slots each at
            # p 0.5 for the same letter); the decode has then failed, and it goes on with the answers
            # nearest to the canvas, as a model would go on from its own mistake.
            miss = {s: sum(c is not None and c != x for c, x in zip(canvas, s)) for s in padded}
            nearest = min(miss.values())
            live = {s: p for s, p in padded.items() if miss[s] == nearest}
            total = sum(live.values())
            best, commits = None, []
            for i in range(lo, hi):
                if canvas[i] is not None:
                    continue
                mass: dict = defaultdict(float)
                for s, p in live.items():
                    mass[s[i]] += p
                token, q = max(sorted(mass.items(), key=lambda kv: str(kv[0])), key=lambda kv: kv[1])
                q /= total
                if best is None or q > best[1]:
                    best = (i, q, token)
                if q >= tau:
                    commits.append((i, token))
            for i, token in commits or [(best[0], best[2])]:
                canvas[i] = token
            if eos in canvas:
                first = canvas.index(eos)
                canvas[first:] = [eos if c is None else c for c in canvas[first:]]
        if eos in canvas[lo:hi]:
            break
    end = canvas.index(eos) + 1 if eos in canvas else width
    committed = tuple(canvas[:end])
    valid = any(s[:end] == committed and all(x == eos for x in s[end:]) for s in padded)
    return OracleResult(committed, end, forwards, valid)
