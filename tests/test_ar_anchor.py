"""ORL's AR-path anchor (orl/train/ar_anchor.py, LossWeights.lambda_ar): its rows by hand, its loss against
full logits, and that it lowers the next-token loss of the kept rollouts in one update."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch

import orl.train.orl as trainer
from orl.checkpoint import load_checkpoint
from orl.model import ModelArgs, Transformer
from orl.train.ar_anchor import ar_anchor_sums, rollout_ar_batch
from orl.train.losses import capped_reverse_kl
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


def tiny(softcap=None, seed=0):
    torch.manual_seed(seed)
    return Transformer(ModelArgs(vocab_size=40, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                                 max_seq_len=64, shift_logits=True, final_logit_softcap=softcap))


@pytest.mark.parametrize("softcap", [None, 3.0])
def test_the_chunked_terms_are_those_of_the_full_logits(softcap):
    model, ref = tiny(softcap), tiny(softcap, seed=1)
    b = rollout_ar_batch([rollout([5, 6, 7], [10, 11, EOS]), rollout([8, 9], [12, 13, 14, 15])], PAD, EOS)
    w_kl = b.weight.clone()
    w_kl[0] = 0.0  # the KL on the second row only, the next-token loss on both
    logits, ref_logits = model(b.tokens, b.pos, b.mask), ref(b.tokens, b.pos, b.mask)
    want_nll = weighted_ce_sum(logits, b)
    want_kl = (capped_reverse_kl(logits.flatten(0, 1), ref_logits.flatten(0, 1), 0.3) * w_kl.flatten()).sum()
    nll, kl = ar_anchor_sums(model, b, b.weight, w_kl, ref, kl_cap=0.3, chunk=3)
    assert torch.allclose(nll, want_nll, rtol=1e-5, atol=1e-5) and torch.allclose(kl, want_kl, rtol=1e-5, atol=1e-5)
    assert kl > 0 and float(ar_anchor_sums(model, b, b.weight, w_kl, model)[1].detach()) == pytest.approx(0.0, abs=1e-5)
    (nll + kl).backward()
    assert model.lm_head.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="needs the reference model"):
        ar_anchor_sums(model, b, b.weight, w_kl)


def test_a_negative_weight_is_refused_by_name():
    with pytest.raises(ValueError, match="lambda_ar must be >= 0"):
        ORLConfig(weights=LossWeights(lambda_ar=-1.0))
    with pytest.raises(ValueError, match="lambda_ar_kl must be >= 0"):
        ORLConfig(weights=LossWeights(lambda_ar_kl=-1.0))


def test_a_base_without_the_shifted_read_out_is_refused_by_name(tmp_path, accept_everything):
    from orl.checkpoint import save_checkpoint
    from orl.tokenizer import CharTokenizer

    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=False))
    plain = save_checkpoint(model, CharTokenizer(), tmp_path / "base", {"block_len": 8})
    cfg = dataclasses.replace(cfg_for(plain), updates=1, weights=LossWeights(lambda_ar=1.0))
    with pytest.raises(ValueError, match="shift_logits=false: set them to 0"):
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
        before = float(ar_anchor_sums(load_checkpoint(base)[0], b, b.weight, 0 * b.weight)[0] / n)
        plain, anchored = (float(ar_anchor_sums(runs[lam], b, b.weight, 0 * b.weight)[0] / n) for lam in (0.0, 20.0))
    assert anchored < before and anchored < plain - 0.01
    import json
    rec = json.loads(open(tmp_path / "r20.0" / "train.log.jsonl").readline())
    assert rec["ar"] == pytest.approx(before, rel=1e-3)  # logged before the update, on the same rows
    assert "ar" not in json.loads(open(tmp_path / "r0.0" / "train.log.jsonl").readline())


def test_the_kl_anchor_holds_the_ar_path_near_the_base(base, tmp_path, accept_everything, monkeypatch):
    """Six updates with and without lambda_ar_kl (its gradient is 0 at the base: it acts from update 2): with
    it, the AR path's KL to the base on the first update's rollouts is smaller, and the log has `ar_kl`."""
    seen = []
    real = trainer.collect
    monkeypatch.setattr(trainer, "collect", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    runs = {}
    for lam in (0.0, 50.0):
        cfg = dataclasses.replace(cfg_for(base), updates=6, weights=LossWeights(lambda_ar_kl=lam))
        train_orl(cfg, tmp_path / f"r{lam}", log=lambda *_: None)
        runs[lam] = load_checkpoint(tmp_path / f"r{lam}")[0]
    tok = load_checkpoint(base)[1]
    b = rollout_ar_batch(seen[0], tok.pad_id, tok.eos_id)
    ref = load_checkpoint(base)[0]
    with torch.no_grad():
        plain, anchored = (float(ar_anchor_sums(runs[lam], b, 0 * b.weight, b.weight, ref)[1]) for lam in (0.0, 50.0))
    assert anchored < 0.7 * plain  # 0.44x measured; equal without the anchor
    import json
    recs = [json.loads(x) for x in open(tmp_path / "r50.0" / "train.log.jsonl")]
    assert recs[0]["ar_kl"] == pytest.approx(0.0, abs=1e-6) and recs[2]["ar_kl"] > 0 and "ar" not in recs[0]
