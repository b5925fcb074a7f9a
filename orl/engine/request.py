"""What every decoder (Engine, ARDecoder) does with a request before its first forward: encode and
check the prompts, check that prompt + answer fit the context and that the seeds match the rows, size
the KV cache to the request, and time the request on a clock that waits for the device."""
from __future__ import annotations

import time

import torch


def encode_prompts(tokenizer, prompts: str | list[str]) -> list[list[int]]:
    prompts = [prompts] if isinstance(prompts, str) else prompts
    for i, p in enumerate(prompts):
        if not isinstance(p, str) or not p:
            raise ValueError(f"prompt {i} is empty; give at least one character")
    return [tokenizer.encode(p) for p in prompts]


def check_request(prompt_ids: list[list[int]], answer_len: int, answer: str, max_len: int,
                  seeds: list[int] | None, seed: int, first_slot: int | None = None) -> tuple[int, list[int]]:
    """-> (padded prompt length P, one sampling seed per row: `seeds`, else seed, seed + 1, ...).
    answer_len: the slots the answer takes (described by `answer` in the error), from `first_slot`
    (default P; on the absolute grid the prompt's partial last blocks lie inside the first canvas, so
    the canvases start at the longest whole-block prefix). Raises ValueError naming the problem."""
    if not prompt_ids:
        raise ValueError("no prompts given")
    lens = [len(p) for p in prompt_ids]
    if min(lens) == 0:
        raise ValueError(f"prompt {lens.index(0)} is empty; give at least one token")
    B, P = len(prompt_ids), max(lens)
    start = P if first_slot is None else first_slot
    if start + answer_len > max_len:
        inside = "" if start == P else f", the first {P - start} inside the first canvas"
        raise ValueError(f"prompt ({P} tokens{inside}) + {answer} exceeds the context of {max_len} tokens; "
                         "shorten the prompt or lower max_new_tokens (or block_len: answers take whole blocks)")
    seeds = seeds if seeds is not None else [seed + b for b in range(B)]
    if len(seeds) != B:
        raise ValueError(f"got {len(seeds)} seeds for {B} prompts")
    return P, list(seeds)


class Clock:
    """Seconds since the request started, read once the device has finished its queued work: CUDA
    kernels run asynchronously, so without the sync a timing would end when the work is launched, not
    when it is done. Timing only, between blocks or chunks: never inside the step loop."""

    def __init__(self, device: torch.device):
        self.device = device
        self.start = self._now()

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def __call__(self) -> float:
        return self._now() - self.start


def prefill_length(P: int, answer_slots: int, max_len: int, smallest: int = 16) -> int:
    """The padded prompt length a captured prefill runs at: the smallest bucket >= P (16, 24, 32, 48,
    64, 96, ...: powers of two and 1.5 times them, so at most a third of the slots are padding once
    P > 16) whose answer still fits the context; P itself when none does. Left padding is exact (pad
    keys are invisible, positions start at each row's first token), so a bucket changes no token;
    it only lets one graph serve every prompt length up to it."""
    bucket = smallest
    while bucket < P:
        bucket = bucket * 3 // 2 if bucket & (bucket - 1) == 0 else bucket * 4 // 3
    return bucket if bucket + answer_slots <= max_len else P


def request_cache_len(need: int, limit: int, floor: int = 64) -> int:
    """Cache slots for a request of `need` tokens: the next power of two (at least floor), at most
    limit (the decoder's max_len). Powers of two bound the distinct shapes by log2 of the context."""
    return min(limit, max(floor, 1 << (need - 1).bit_length()))
