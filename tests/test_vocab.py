"""Banned output ids of orl.model.vocab: which ids, and the two forms that apply them."""
import torch

from orl.model.vocab import _runs, ban_tokens, banned_mask, special_ids
from orl.tokenizer import CharTokenizer


def test_ban_tokens_runs_and_values():
    assert _runs((2, 0, 10, 11, 12, 13)) == [(0, 1), (2, 3), (10, 14)]
    assert _runs((5, 5, 6)) == [(5, 7)]
    logits = torch.arange(2 * 3 * 16, dtype=torch.float).view(2, 3, 16)
    out = ban_tokens(logits, (2, 0) + tuple(range(12, 16)))
    banned = torch.zeros(16, dtype=torch.bool)
    banned[[0, 2, 12, 13, 14, 15]] = True
    assert torch.isneginf(out[..., banned]).all()
    assert torch.equal(out[..., ~banned], logits[..., ~banned])
    # the engine's precomputed form (DecodeState.banned), applied with one masked_fill in the step
    assert torch.equal(banned_mask(16, (2, 0) + tuple(range(12, 16))), banned)


def test_special_ids_ban_mask_pad_and_padded_vocab_rows():
    tok = CharTokenizer()
    ids = special_ids(tok, tok.vocab_size + 3)
    assert (ids.mask, ids.eos, ids.pad) == (tok.mask_id, tok.eos_id, tok.pad_id)
    assert set(ids.banned) == {tok.mask_id, tok.pad_id} | set(range(tok.vocab_size, tok.vocab_size + 3))
    assert tok.eos_id not in ids.banned


def test_special_ids_keep_a_pad_that_doubles_as_eos():
    class HFLike:  # many HF tokenizers pad with EOS: banning pad would ban EOS
        mask_id, eos_id, pad_id, vocab_size = 5, 2, 2, 10

    assert special_ids(HFLike(), 10).banned == (5,)
