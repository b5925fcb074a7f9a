"""The request setup shared by the diffusion engine, the AR decoder and training rows: left padding,
prompt / context / seed checks, and the clock."""
import pytest
import torch

from orl.engine.request import Clock, check_request, encode_prompts
from orl.model.padding import left_pad
from orl.tokenizer import CharTokenizer


def test_left_pad_right_aligns_every_prompt():
    tokens, pad = left_pad([[5, 6, 7], [8], [9, 10]], pad_id=0)
    assert tokens.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 10]]
    assert pad.tolist() == [0, 2, 1]
    assert tokens.dtype == pad.dtype == torch.long


def test_check_request_seeds_and_padded_length():
    assert check_request([[1, 2], [3]], 8, "8 slots", 16, None, 5) == (2, [5, 6])
    assert check_request([[1]], 8, "8 slots", 16, [42], 5) == (1, [42])


@pytest.mark.parametrize("prompts,answer_len,seeds,words", [
    ([], 4, None, "no prompts"),
    ([[1], []], 4, None, "prompt 1 is empty"),
    ([[1] * 10], 8, None, r"prompt \(10 tokens\) \+ 2 blocks of 4 exceeds the context of 16"),
    ([[1], [2]], 4, [7], "got 1 seeds for 2 prompts"),
])
def test_check_request_names_the_problem(prompts, answer_len, seeds, words):
    with pytest.raises(ValueError, match=words):
        check_request(prompts, answer_len, "2 blocks of 4", 16, seeds, 0)


def test_encode_prompts_refuses_empty_text():
    tok = CharTokenizer()
    assert encode_prompts(tok, "ab") == [tok.encode("ab")]
    with pytest.raises(ValueError, match="prompt 1 is empty; give at least one character"):
        encode_prompts(tok, ["ab", ""])


def test_clock_counts_from_its_start():
    clock = Clock(torch.device("cpu"))
    a = clock()
    b = clock()
    assert 0 <= a <= b < 5
