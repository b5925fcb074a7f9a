"""The terminal view of one denoising step (orl generate --show-steps, orl demo)."""
import torch

from orl.cli_format import format_step
from orl.engine.trace import StepRecord
from orl.tokenizer import CharTokenizer

TOK = CharTokenizer()


def record(canvas, unresolved, tokens, committed) -> StepRecord:
    n = len(canvas)
    return StepRecord(block=0, step=0, canvas=torch.tensor(canvas), unresolved=torch.tensor(unresolved),
                      z=None, a=None, tokens=torch.tensor(tokens), confidence=torch.ones(n),
                      entropy=torch.zeros(n), committed=torch.tensor(committed))


def test_settled_masked_and_committed_positions():
    (a, b, c), m = TOK.encode("abc"), TOK.mask_id
    r = record([a, m, m, m], [False, True, True, True], [a, b, c, c], [False, True, False, False])
    assert format_step(TOK, r, n_valid=4) == "a[b]__"
    assert format_step(TOK, r, n_valid=2) == "a[b]"                       # beyond max_new_tokens: not shown
    assert format_step(TOK, r, n_valid=4, color=True) == "a\x1b[1;32mb\x1b[0m__"


def test_start_skips_the_prompt_tail_of_an_absolute_grid_block():
    (p, a, b), m = TOK.encode("=ab"), TOK.mask_id
    r = record([p, m, m, m], [False, True, True, True], [p, a, b, b], [False, True, False, False])
    assert format_step(TOK, r, n_valid=3, start=1) == "[a]__"  # the prompt's '=' is not an answer position
    assert format_step(TOK, r, n_valid=2, start=1) == "[a]_"


def test_eos_fill_of_the_same_step_shows_as_eos():
    a, m, eos = TOK.encode("a")[0], TOK.mask_id, TOK.eos_id
    r = record([a, m, m, m], [False, True, True, True], [a, eos, a, a], [False, True, False, False])
    assert format_step(TOK, r, n_valid=4) == "a[<eos>]<eos><eos>"
    assert format_step(TOK, r, n_valid=4, eos_fill=False) == "a[<eos>]__"
