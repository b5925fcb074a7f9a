"""Stop strings (OpenAI's `stop`): a row ends at the first occurrence of any of them in its decoded text.

They are checked on the host where every decoder already reads its state back: once per block
(Engine, full_sequence), once per chunk of steps (ARDecoder), once per verify forward (speculative).
So a stop string adds no host sync to the step loop; a row that stops inside a block or chunk has
its later tokens discarded, as after an EOS.

What a stopped row returns, as OpenAI's API does: its text ends just before the stop string; its
token_ids end with the token that completed the stop string. Those tokens were generated and their
forwards spent, so TPF counts them (DESIGN section 5: tokens up to and including the one that
ends the row, EOS or the stop string's last token).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

MAX_STOPS = 16         # OpenAI's API takes 4; HumanEval's Codex stop sequences are 6
MAX_STOP_CHARS = 256   # each one is searched in the whole text after every block: bounded


def as_stops(stop) -> object:
    """A config's `stop` as a tuple: one string -> (it,), a list -> tuple, None -> (); anything else
    is left for stop_problems to name."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list):
        return tuple(stop)
    return stop


def stop_problems(stop) -> list[str]:
    stop = as_stops(stop)
    if not isinstance(stop, tuple) or not all(isinstance(s, str) for s in stop):
        shown = repr(stop)
        return [f"stop must be a string or a list of strings, got {shown[:80]}{'...' if len(shown) > 80 else ''}"]
    problems = []
    if len(stop) > MAX_STOPS:
        problems.append(f"stop takes at most {MAX_STOPS} strings, got {len(stop)}")
    if any(not s for s in stop):
        problems.append("stop strings must not be empty")
    if any(len(s) > MAX_STOP_CHARS for s in stop):
        problems.append(f"stop strings must be at most {MAX_STOP_CHARS} characters, got "
                        f"{max(len(s) for s in stop)}")
    return problems


def earliest(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """(index, stop string) of the first stop string in text (the longest at a tie), or None."""
    found = [(i, -len(s), s) for s in stops if (i := text.find(s)) >= 0]
    if not found:
        return None
    i, _, s = min(found)
    return i, s


def held_back(text: str, stops: tuple[str, ...]) -> str:
    """text without its longest suffix that begins some stop string: a stream must not send what may
    turn out to be the start of a stop string (the next block can complete it)."""
    for k in range(min(len(text), max((len(s) for s in stops), default=1) - 1), 0, -1):
        if any(s.startswith(text[-k:]) for s in stops):
            return text[:-k]
    return text


def with_stop(cfg, stop: tuple[str, ...]):
    """cfg with a task's own stop strings (k-shot prompts: the newline), unless cfg sets its own or has
    none to set (a canvas decoder)."""
    if not stop or not hasattr(cfg, "stop") or cfg.stop:
        return cfg
    return replace(cfg, stop=tuple(stop))


@dataclass(frozen=True)
class StopHit:
    n_tokens: int   # tokens the row keeps: through the one that completed the stop string
    text: str       # the row's text before the stop string
    stop: str       # which stop string


class Stops:
    """A request's stop strings with the tokenizer that turns a row's tokens into the text they match."""

    def __init__(self, tokenizer, strings: tuple[str, ...]):
        self.tokenizer, self.strings = tokenizer, tuple(strings)
        self.longest = max((len(x) for x in self.strings), default=0)

    def __bool__(self) -> bool:
        return bool(self.strings)

    def find(self, ids: list[int], checked: int = 0) -> StopHit | None:
        """The stop in ids, whose first `checked` tokens held none.

        Cheap when there is none, which is every check but the last: only a window is decoded, the new
        tokens and enough tokens before them to hold a stop string's first characters (a stop that ends
        in the new text starts in the window; one that ended earlier was found earlier), so checking a
        row after every block or chunk costs O(new tokens), not O(answer). On a hit, the text of a prefix
        of ids is a prefix of their text (up to a split multi-byte character), so the fewest tokens
        whose text holds the stop are found by bisection over whole-prefix decodes: O(log n) decodes."""
        if not self.strings or len(ids) <= checked:
            return None
        # a token decodes to at least one character, or to one of the <= 4 bytes of one
        start = max(0, checked - 4 * self.longest)
        window = self.tokenizer.decode(ids[start:]).lstrip("\ufffd")  # a character split at the window's start
        if earliest(window, self.strings) is None:
            return None
        lo, hi = checked + 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if earliest(self.tokenizer.decode(ids[:mid]), self.strings) is None:
                lo = mid + 1
            else:
                hi = mid
        text = self.tokenizer.decode(ids[:lo])
        if (found := earliest(text, self.strings)) is None:  # the window's decode disagreed with the whole text's
            return None
        i, s = found
        return StopHit(lo, text[:i], s)

    def visible(self, ids: list[int], hit: StopHit | None) -> str:
        """The text of a row so far as a stream may show it: up to its stop string once it has one,
        else without a tail that may become one. A trailing U+FFFD is half a multi-byte character
        (byte-level tokenizers): the stream holds it back until the next block completes it, so the tail
        before it is judged as what it will be followed by, not as the end of the text."""
        if hit is not None:
            return hit.text
        text = self.tokenizer.decode(ids)
        return held_back(text.rstrip("\ufffd"), self.strings) if self.strings else text


class RowStops:
    """The AR decoder's stop check per row, fed each chunk's tokens as they are read back: a row's tokens
    so far (up to its first EOS) and its hit. Only the new tokens are read back and searched for EOS, and
    Stops.find decodes a window, so a whole answer costs O(n) host work, not O(n^2 / chunk_steps)."""

    def __init__(self, stops: Stops, batch: int, eos: set[int]):
        self.stops, self.eos = stops, eos
        self.ids: list[list[int]] = [[] for _ in range(batch)]
        self.ended = [False] * batch           # the row's EOS is in ids: nothing after it counts
        self.hits: list[StopHit | None] = [None] * batch

    def add(self, chunk: list[list[int]]) -> list[int]:
        """chunk [B][k]: the tokens of the steps since the last call. -> the rows that hit a stop now."""
        now = []
        for b, new in enumerate(chunk):
            if self.ended[b] or self.hits[b] is not None:
                continue
            end = next((i for i, t in enumerate(new) if t in self.eos), None)
            if end is not None:
                new, self.ended[b] = new[: end + 1], True
            checked = len(self.ids[b])
            self.ids[b].extend(new)
            if (hit := self.stops.find(self.ids[b], checked)) is not None:
                self.hits[b] = hit
                now.append(b)
        return now
