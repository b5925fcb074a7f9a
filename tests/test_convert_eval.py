"""benchmarks/convert_eval.py on tiny models. The anchor: an AR model converted without training
(the shifted read-out, same weights) decodes blocks of ONE token after a one-token prompt exactly as
the AR decoder does - the block's only position reads the state of the last committed token, the AR
next-token state - so every agreement is 1 and TPF is 1. A longer prompt is one bidirectional block
under the engine (and the staircase training rows), so there the untrained model already differs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.tokenizer import CharTokenizer
from orl.train.convert import to_diffusion

pytestmark = pytest.mark.usefixtures("one_thread")

TOK = CharTokenizer()
spec = importlib.util.spec_from_file_location("convert_eval", Path(__file__).parents[1] / "benchmarks" / "convert_eval.py")
ce = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ce)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("ce")
    torch.manual_seed(0)
    m = Transformer(ModelArgs(vocab_size=TOK.vocab_size, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                              ffn_dim=128, max_seq_len=256, tie_embeddings=False))
    with torch.no_grad():  # large logits, so greedy picks vary and no special id is ever the argmax
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif "embed" in name or "lm_head" in name:
                p.normal_(std=1.0)
            else:
                p.normal_(std=3 * p.shape[1] ** -0.5)
        m.lm_head.weight[:3] = 0  # logit 0 for pad, EOS, mask: never the max of ~95 large random logits
    save_checkpoint(m.eval(), TOK, d / "ar", {"objective": "autoregressive"})
    save_checkpoint(to_diffusion(m).eval(), TOK, d / "dlm", {"objective": "block_diffusion", "block_len": 4})
    stream = torch.randint(3, TOK.vocab_size, (400,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    return d, stream


def test_block_of_one_reproduces_the_ar_decoder(models):
    d, stream = models
    res = ce.evaluate(str(d / "ar"), str(d / "dlm"), stream, windows=6, context=1, block=1, threshold=0.9,
                      free_tokens=8, free_prompts=3)
    nb, fr = res["next_block"], res["free_running"]
    assert nb["dlm_block_agrees_with_ar"] == 1.0 and nb["dlm"] == nb["ar"] and nb["dlm_tpf"] == 1.0
    assert fr["position_agreement"] == 1.0 and fr["mean_agreed_prefix"] == 8 and fr["dlm_tpf"] == 1.0
    assert fr["ar_tok_s"] > 0 and fr["dlm_tok_s"] > 0
    # a 10-token prompt is bidirectional under the engine: the untrained conversion drifts from AR
    res = ce.evaluate(str(d / "ar"), str(d / "dlm"), stream, windows=6, context=10, block=1, threshold=0.9,
                      free_tokens=8, free_prompts=3)
    assert res["free_running"]["position_agreement"] < 1.0


def test_untrained_blocks_of_four_disagree_and_are_counted(models):
    d, stream = models
    res = ce.evaluate(str(d / "ar"), str(d / "dlm"), stream, windows=6, context=10, block=None, threshold=0.5,
                      free_tokens=8, free_prompts=3)
    nb = res["next_block"]
    assert nb["block"] == 4  # the manifest's block_len
    assert nb["dlm_block_agrees_with_ar"] < 1.0 and res["free_running"]["position_agreement"] < 1.0
    assert 0.0 <= nb["dlm"]["token_acc"] <= 1.0 and nb["dlm_tpf"] >= 1.0
    # --dlm untrained is that same model, made in process
    again = ce.evaluate(str(d / "ar"), ce.UNTRAINED, stream, windows=6, context=10, block=4, threshold=0.5,
                        free_tokens=8, free_prompts=1)
    assert again["next_block"] == nb


@pytest.mark.parametrize("draft", ["fused", "diffusion"])
def test_self_speculative_decoding_of_the_untrained_conversion_is_the_ar_original(models, draft):
    """--spec: the converted model's AR path verifies its own diffusion drafts. Untrained, that path IS the AR
    original (same weights, causal rows, shifted read-out), so its tokens are the AR decoder's, whatever the
    drafts; TPF counts every forward (a two-forward drafter's drafts too)."""
    d, stream = models
    seen = []
    res = ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, windows=6, context=10, block=4,
                                 thresholds=(0.5,), free_tokens=8, free_prompts=3, spec=3, spec_draft=draft,
                                 on_result=lambda rs: seen.append(len(rs)))
    assert seen == [1, 2]  # each decoder's result handed out as it comes (--out is rewritten there)
    assert [r["decoder"] for r in res] == ["threshold", f"self-spec {draft} k=3"] and res[1]["threshold"] is None
    nb, fr = res[1]["next_block"], res[1]["free_running"]
    assert nb["dlm"] == nb["ar"] and nb["dlm_block_agrees_with_ar"] == 1.0
    assert fr["position_agreement"] == 1.0 and fr["mean_agreed_prefix"] == 8
    assert res[0]["next_block"]["dlm_block_agrees_with_ar"] < 1.0  # the block decoder of the same weights is not
    if draft == "fused":
        assert nb["dlm_tpf"] >= 1.0  # one forward a round, at least one token a round
    with pytest.raises(ValueError, match="--spec-draft 'lookup'"):
        ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, 2, 10, 4, (0.5,), 4, 1, spec=3, spec_draft="lookup")


def test_bad_spec_settings_are_refused_before_any_decoding(models, monkeypatch):
    d, stream = models
    ran = []
    monkeypatch.setattr(ce, "next_block", lambda *a, **k: ran.append(1))
    with pytest.raises(ValueError, match="--spec must be >= 0"):
        ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, 2, 10, 4, (0.5,), 4, 1, spec=-1)
    # an AR checkpoint has no diffusion path to draft with: named before the threshold rows run
    with pytest.raises(ValueError, match="needs a block-diffusion checkpoint"):
        ce.evaluate_thresholds(str(d / "ar"), str(d / "ar"), stream, 2, 10, 4, (0.5,), 4, 1, spec=3)
    assert not ran


def test_the_ar_original_as_verifier_gives_its_tokens_from_a_drifted_conversion(models, tmp_path):
    """--spec-verifier ar (orl.model.row_split): a conversion whose AR path drifted from the original's (here:
    perturbed weights) verifies to its own tokens, not the original's; with the original's weights on the
    verify rows the tokens are the original's again, and --thresholds none skips the block decoder."""
    d, stream = models
    dlm, tok, manifest = load_checkpoint(d / "dlm")
    with torch.no_grad():
        for p in dlm.parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    save_checkpoint(dlm, tok, tmp_path / "drift", manifest)
    kw = dict(windows=6, context=10, block=4, free_tokens=8, free_prompts=3, spec=3)
    own = ce.evaluate_thresholds(str(d / "ar"), str(tmp_path / "drift"), stream, thresholds=(), **kw)
    ar = ce.evaluate_thresholds(str(d / "ar"), str(tmp_path / "drift"), stream, thresholds=(), spec_verifier="ar", **kw)
    assert [r["decoder"] for r in own + ar] == ["self-spec fused k=3", "self-spec fused k=3 verifier=ar"]
    assert own[0]["free_running"]["position_agreement"] < 1.0
    nb, fr = ar[0]["next_block"], ar[0]["free_running"]
    assert nb["dlm"] == nb["ar"] and nb["dlm_block_agrees_with_ar"] == 1.0 and fr["position_agreement"] == 1.0
    low = ce.evaluate_thresholds(str(d / "ar"), str(tmp_path / "drift"), stream, thresholds=(), spec_verifier="ar",
                                 draft_rank=2, **kw)[0]
    assert low["decoder"] == "self-spec fused k=3 verifier=ar rank=2" and low["draft_delta"]["units"] > 0
    assert low["next_block"]["dlm_block_agrees_with_ar"] == 1.0 and low["free_running"]["position_agreement"] == 1.0
    with pytest.raises(ValueError, match="--draft-rank is for"):
        ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, thresholds=(), draft_rank=2, **kw)
    with pytest.raises(ValueError, match="--spec-verifier 'mine'"):
        ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, thresholds=(), spec_verifier="mine", **kw)


def test_draft_groups_and_a_draft_vocabulary_keep_the_originals_tokens(models, tmp_path):
    """--spec-groups G and --draft-vocab (orl.model.draft_vocab) change only the drafts: the tokens stay the AR
    original's (that a narrow vocabulary costs forwards: tests/test_draft_vocab.py, on a model whose drafts land)."""
    d, stream = models
    kw = dict(windows=6, context=10, block=4, free_tokens=8, free_prompts=3, spec=3, thresholds=(), spec_verifier="ar")
    full = ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, **kw)[0]
    ids = torch.arange(3, 13)   # 10 of ~95 tokens
    r = ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, spec_groups=2, draft_ids=ids, **kw)[0]
    assert r["decoder"] == "self-spec fused k=3 verifier=ar groups=2 vocab=10"
    assert r["next_block"]["dlm_block_agrees_with_ar"] == 1.0 and r["free_running"]["position_agreement"] == 1.0
    assert r["free_running"]["n"] == full["free_running"]["n"] == 3
    with pytest.raises(ValueError, match="--spec-groups / --draft-vocab are for the --spec decoder"):
        ce.evaluate_thresholds(str(d / "ar"), str(d / "dlm"), stream, 2, 10, 4, (0.5,), 4, 1, spec_groups=2)


def test_main_reads_the_named_stream_and_records_it(models, tmp_path, monkeypatch, capsys):
    """--stream picks the windows' stream (code_train: choosing a setting without the held-out split), the result
    says which, and a stream the corpus lacks is named with the ones it has."""
    import json
    import sys

    from safetensors.torch import save_file

    d, stream = models
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    save_file({"code_heldout": stream, "code_train": stream.flip(0).contiguous()}, str(corpus / "tokens.safetensors"))
    seen = []
    real = ce.evaluate_thresholds
    monkeypatch.setattr(ce, "evaluate_thresholds", lambda ar, dlm, s, *a, **k: seen.append(s) or real(ar, dlm, s, *a, **k))
    for name, want in (("code_heldout", stream), ("code_train", stream.flip(0))):
        out = tmp_path / f"{name}.json"
        monkeypatch.setattr(sys, "argv", ["convert_eval", "--ar", str(d / "ar"), "--dlm", str(d / "dlm"), "--corpus",
                                          str(corpus), "--stream", name, "--windows", "4", "--context", "8",
                                          "--free-tokens", "4", "--free-prompts", "2", "--out", str(out)])
        ce.main()
        res = json.loads(out.read_text())
        assert torch.equal(seen[-1], want) and res["stream"] == name
        # per prompt: what the pooled TPF is the ratio of sums of (a paired test across decoders reads them)
        per = res["free_running"]["per_prompt"]
        assert len(per) == 2 and res["free_running"]["dlm_tpf"] == pytest.approx(
            sum(p["tokens"] for p in per) / sum(p["forwards"] for p in per))
    monkeypatch.setattr(sys, "argv", ["convert_eval", "--ar", str(d / "ar"), "--dlm", str(d / "dlm"), "--corpus",
                                      str(corpus), "--stream", "distill"])
    with pytest.raises(SystemExit):
        ce.main()
    assert "the corpus has code_heldout, code_train" in capsys.readouterr().err
    # --free-offset: the free runs start from later windows (fresh prompts), and never past the windows
    prompts = []
    real_free = ce.free_running
    monkeypatch.setattr(ce, "free_running", lambda ar, dec, prefixes, *a: prompts.append(prefixes) or
                        real_free(ar, dec, prefixes, *a))
    base_args = ["convert_eval", "--ar", str(d / "ar"), "--dlm", str(d / "dlm"), "--corpus", str(corpus), "--windows",
                 "4", "--context", "8", "--free-tokens", "4", "--free-prompts", "2"]
    for off in ("0", "2"):
        monkeypatch.setattr(sys, "argv", base_args + ["--free-offset", off, "--out", str(tmp_path / f"o{off}.json")])
        ce.main()
        assert json.loads((tmp_path / f"o{off}.json").read_text())["free_offset"] == int(off)
    rows = ce.held_out_rows(stream, 4, 8 + 4, None)
    assert prompts[-2] == [r[:8] for r in rows[:2]] and prompts[-1] == [r[:8] for r in rows[2:4]]
    monkeypatch.setattr(sys, "argv", base_args + ["--free-offset", "3"])
    with pytest.raises(SystemExit):
        ce.main()
    assert "must lie within --windows 4" in capsys.readouterr().err
