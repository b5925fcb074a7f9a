"""ORL's AR-path anchor (orl/train/ar_anchor.py, LossWeights.lambda_ar): its rows by hand, its loss against
full logits, and that it lowers the next-token loss of the kept rollouts in one update."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch

import orl.train.orl as trainer
from orl.checkpoint import load_checkpoint
from orl.model import ModelArgs, Transformer
from orl.train.ar_anchor import ar_anchor_sum, rollout_ar_batch
from orl.train.batches import weighted_ce_sum
from orl.train.objective import LossWeights
from orl.train.orl import ORLConfig, train_orl
from tests.test_orl_trainer import accept_everything, base, cfg_for  # noqa: F401 - fixtures

PAD, EOS = 0, 1


def rollout(prompt, tokens):
    return SimpleNamespace(gen=SimpleNamespace(prompt_ids=prompt, token_ids=tokens))


def test_rows_target_the_generated_tokens_and_eos_only_where_it_was_emitted():
    b = rollout_ar_batch([rollout([5, 6, 7], [10, 11, EOS]), rollout([8], [12, 13, 14])], PAD, EOS)
    # row 0: prompt 5 6 7 | 10 11 EOS (+ EOS pad); row 1: left-padded prompt 8 | 12 13 14, cut: no EOS to learn
    assert b.tokens.tolist() == [[5, 6, 7, 10, 11, EOS], [PAD, PAD, 8, 12, 13, 14]]
    assert b.targets.tolist() == [[6, 7, 10, 11, EOS, EOS], [PAD, 8, 12, 13, 14, EOS]]
    assert b.weight.tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0]]
    assert b.pos[1].tolist() == [0, 0, 0, 1, 2, 3]  # positions count from the first real token
    # a row that generated nothing, and one a stop string ended (its last token is the stop's, not EOS)
    b = rollout_ar_batch([rollout([5, 6], []), rollout([7, 8], [20, 21])], PAD, EOS)
    assert b.weight.tolist() == [[0, 0, 0, 0], [0, 1, 1, 0]] and b.targets[1].tolist() == [8, 20, 21, EOS]
    with pytest.raises(ValueError, match="at least one rollout"):
        rollout_ar_batch([], PAD, EOS)


@pytest.mark.parametrize("softcap", [None, 3.0])
def test_the_chunked_loss_is_the_weighted_cross_entropy_of_the_full_logits(softcap):
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=40, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                                  max_seq_len=64, shift_logits=True, final_logit_softcap=softcap))
    b = rollout_ar_batch([rollout([5, 6, 7], [10, 11, EOS]), rollout([8, 9], [12, 13, 14, 15])], PAD, EOS)
    want = weighted_ce_sum(model(b.tokens, b.pos, b.mask), b)
    got = ar_anchor_sum(model, b, chunk=3)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    got.backward()
    assert model.lm_head.weight.grad.abs().sum() > 0


def test_a_negative_weight_is_refused_by_name():
    with pytest.raises(ValueError, match="lambda_ar must be >= 0"):
        ORLConfig(weights=LossWeights(lambda_ar=-1.0))


def test_a_base_without_the_shifted_read_out_is_refused_by_name(tmp_path, accept_everything):
    from orl.checkpoint import save_checkpoint
    from orl.tokenizer import CharTokenizer

    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=False))
    plain = save_checkpoint(model, CharTokenizer(), tmp_path / "base", {"block_len": 8})
    cfg = dataclasses.replace(cfg_for(plain), updates=1, weights=LossWeights(lambda_ar=1.0))
    with pytest.raises(ValueError, match="shift_logits=false: set lambda_ar=0"):
        train_orl(cfg, tmp_path / "run", log=lambda *_: None)


def test_the_anchor_lowers_the_next_token_loss_of_the_kept_rollouts(base, tmp_path, accept_everything, monkeypatch):
    """One update from the same base and seed (so the same rollouts) with and without the anchor: with it,
    the AR path's loss on those rollouts falls further."""
    kept_seen = []
    real = trainer.select_kept
    monkeypatch.setattr(trainer, "select_kept", lambda *a: kept_seen.append(real(*a)) or kept_seen[-1])
    runs = {}
    for lam in (0.0, 20.0):
        cfg = dataclasses.replace(cfg_for(base), updates=1, weights=LossWeights(lambda_ar=lam))
        train_orl(cfg, tmp_path / f"r{lam}", log=lambda *_: None)
        runs[lam] = load_checkpoint(tmp_path / f"r{lam}")[0]
    kept_a, kept_b = kept_seen
    assert [r.gen.token_ids for r in kept_a] == [r.gen.token_ids for r in kept_b]  # the same rollouts
    tok_ids = load_checkpoint(base)[1]
    b = rollout_ar_batch(kept_a, tok_ids.pad_id, tok_ids.eos_id)
    n = b.weight.sum()
    with torch.no_grad():
        before = float(ar_anchor_sum(load_checkpoint(base)[0], b) / n)
        plain, anchored = (float(ar_anchor_sum(runs[lam], b) / n) for lam in (0.0, 20.0))
    assert anchored < before and anchored < plain - 0.01
    import json
    rec = json.loads(open(tmp_path / "r20.0" / "train.log.jsonl").readline())
    assert rec["ar"] == pytest.approx(before, rel=1e-3)  # logged before the update, on the same rows
    assert "ar" not in json.loads(open(tmp_path / "r0.0" / "train.log.jsonl").readline())
