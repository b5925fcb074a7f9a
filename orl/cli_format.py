"""Terminal rendering of denoising steps, for `orl generate --show-steps` and `orl demo`."""
from __future__ import annotations

from orl.engine.trace import StepRecord


def format_step(tokenizer, record: StepRecord, n_valid: int, eos_fill: bool = True, color: bool = False,
                start: int = 0) -> str:
    """One denoising step as text: settled tokens, '_' where still masked, the tokens this step
    committed in brackets (bold green on a terminal); the block's n_valid answer positions from canvas index
    start (StepEvent.start: an absolute-grid block 0 opens with the prompt's tail, which is not shown)."""
    eos = tokenizer.eos_id
    canvas, unresolved = record.canvas.tolist(), record.unresolved.tolist()
    tokens, committed = record.tokens.tolist(), record.committed.tolist()
    out, seen_eos = [], False
    for i in range(start, start + n_valid):
        new = committed[i]
        if new:
            t = tokens[i]
        elif not unresolved[i]:
            t = canvas[i]
        elif eos_fill and seen_eos:
            t = eos  # resolved by the EOS fill of this very step
        else:
            out.append("_")
            continue
        seen_eos = seen_eos or t == eos
        text = "<eos>" if t == eos else tokenizer.token_str(t).replace("\n", "\\n")
        if new:
            text = f"\x1b[1;32m{text}\x1b[0m" if color else f"[{text}]"
        out.append(text)
    return "".join(out)
