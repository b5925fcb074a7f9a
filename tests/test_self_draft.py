"""Self-speculative decoding (orl.engine.self_draft): a block-diffusion checkpoint drafts with its diffusion
path and verifies with its AR path, so its tokens are exactly the AR path's; forwards count drafts and
verifies; what cannot draft for itself is refused by name."""
from pathlib import Path

import pytest
import torch

import orl.engine.speculative as spec
from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.config import UnsupportedSetting
from orl.engine.self_draft import diffusion_draft
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer

BASE = Path(__file__).resolve().parents[1] / "checkpoints" / "orl-tiny-base"
PROMPTS = ["cumsum:877347649366134=", "echo a=7;c=a+1;a=c+6;b=2+a:", "sort:j5,e4,a3,b4,d3,h2,i3=", "?+?=201", "xyz"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def base():
    model, tok, manifest = load_checkpoint(BASE)
    return ARDecoder(model, tok, manifest=manifest)


@pytest.mark.parametrize("draft", ["diffusion", "fused"])  # fused: tests/test_fused_self_draft.py
@pytest.mark.parametrize("k", [1, 4, 15])
def test_self_draft_emits_the_ar_paths_tokens(base, k, draft):
    plain = ARConfig(max_new_tokens=40)
    selfspec = ARConfig(max_new_tokens=40, spec_tokens=k, spec_draft=draft)
    for p in PROMPTS:
        a = base.generate([p], plain)[0]
        s = base.generate([p], selfspec)[0]
        assert s.token_ids == a.token_ids, (p, k)


@pytest.mark.parametrize("draft", ["diffusion", "fused"])
def test_sampled_tokens_are_the_ar_paths_too(base, draft):
    """temperature > 0: the verify chooses each token with the same counter-based noise as plain decoding."""
    for p in PROMPTS[:3]:
        for seed in (0, 1):
            a = base.generate([p], ARConfig(max_new_tokens=30, temperature=1.0, seed=seed))[0]
            s = base.generate([p], ARConfig(max_new_tokens=30, temperature=1.0, seed=seed, spec_tokens=6,
                                            spec_draft=draft))[0]
            assert s.token_ids == a.token_ids, (p, seed)


def test_forwards_count_drafts_and_verifies(base, monkeypatch):
    """Per round one draft forward (when there is room to draft) and one verify forward; a round yields
    the accepted draft tokens + 1. On the shipped base the drafts are mostly accepted (TPF > 1)."""
    rounds, drafts = [], []
    real_accepted, real_draft = spec.accepted, spec.diffusion_draft
    monkeypatch.setattr(spec, "accepted", lambda d, t: rounds.append(real_accepted(d, t)) or rounds[-1])
    monkeypatch.setattr(spec, "diffusion_draft",
                        lambda *a: drafts.append(a[4]) or real_draft(*a))
    g = base.generate(["cumsum:877347649366134="], ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="diffusion"))[0]
    assert g.step_forwards == len(rounds) + sum(1 for k in drafts if k > 0)
    assert sum(rounds) > len(rounds) and g.tpf > 1.2, (rounds, g.tpf)


def test_draft_reads_the_diffusion_path(base):
    """The draft is the greedy read-out of [last, masks] with the window bidirectional: the same as the
    model's forward over the whole sequence with those masks appended and a block-style mask."""
    model, tok = base.model, base.tokenizer
    prompt = tok.encode("sort:dcba=")
    st = base.setup([prompt], ARConfig(max_new_tokens=8))
    k = 5
    draft = diffusion_draft(model, st, len(prompt) - 1, prompt[-1], k, tok.mask_id)
    seq = torch.tensor([prompt + [tok.mask_id] * k])
    T = seq.shape[1]
    q, kk = torch.arange(T)[:, None], torch.arange(T)[None, :]
    window = len(prompt) - 1
    # causal up to the last token (itself clean), the masks see each other
    mask = ((kk <= q) | (kk >= window) & (q > window))[None]
    logits = model(seq, torch.arange(T)[None], mask)[0]
    logits[:, tok.mask_id] = float("-inf")
    assert draft == logits[window:window + k].argmax(-1).tolist()


def test_refusals(base):
    args = ModelArgs(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                     max_seq_len=64, shift_logits=False)
    unshifted = ARDecoder(Transformer(args), CharTokenizer())
    with pytest.raises(UnsupportedSetting, match="shifted read-out"):
        unshifted.generate(["ab"], ARConfig(max_new_tokens=4, spec_tokens=2, spec_draft="diffusion"))
    tok = CharTokenizer()
    tok.mask_id = None
    no_mask = ARDecoder(base.model, tok)
    with pytest.raises(UnsupportedSetting, match="mask token"):
        no_mask.generate(["ab"], ARConfig(max_new_tokens=4, spec_tokens=2, spec_draft="diffusion"))
    with pytest.raises(ValueError, match="spec_draft"):
        ARConfig(spec_tokens=2, spec_draft="medusa").validate()
    with pytest.raises(ValueError, match="spec_tokens > 0"):  # not a silent plain AR decode
        ARConfig(spec_draft="diffusion").validate()
    with pytest.raises(ValueError, match="spec_ngram"):
        ARConfig(spec_tokens=2, spec_ngram=3, spec_draft="diffusion").validate()


def test_an_autoregressive_checkpoint_cannot_draft_for_itself():
    model, tok, manifest = load_checkpoint(BASE.parent / "orl-tiny-ar")
    with pytest.raises(UnsupportedSetting, match="block-diffusion checkpoint"):
        ARDecoder(model, tok, manifest=manifest).generate(
            ["ab"], ARConfig(max_new_tokens=4, spec_tokens=2, spec_draft="diffusion"))


def test_cli_generate_refuses_an_autoregressive_checkpoint(capsys):
    from orl.cli import main

    assert main(["generate", "--model", str(BASE.parent / "orl-tiny-ar"), "ab", "--spec-tokens", "4",
                 "--spec-draft", "diffusion"]) != 0
    assert "block-diffusion checkpoint" in capsys.readouterr().err


def test_eval_refuses_block_decoder_settings(tmp_path):
    from orl.eval.runner import EvalSpec, run_eval

    for extra in (dict(thresholds=[0.5]), dict(decode={"block_len": 4})):
        spec = EvalSpec(model=str(BASE), out=str(tmp_path / "r.jsonl"), tasks=["long"], limit=1, batch_size=1,
                        ar={"spec_tokens": 4, "spec_draft": "diffusion"}, **extra)
        with pytest.raises(ValueError, match="not used with --spec-draft diffusion"):
            run_eval(spec)
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("draft, label, groups", [("diffusion", "AR +self-draft k8", []),
                                                  ("fused", "AR +fused self-draft k8", []),
                                                  ("fused", "AR +fused self-draft k8 g3", ["--spec-groups", "3"])])
def test_cli_generate_and_eval(tmp_path, capsys, draft, label, groups):
    """`orl generate` and `orl eval` on the shipped base with --spec-draft diffusion | fused: the AR path's text,
    the record labelled and its TPF above one; a block-decoder flag beside it is refused by name."""
    from orl.cli import main
    from orl.eval.records import decoder_label, read_records

    assert main(["generate", "--model", str(BASE), "cumsum:877347649366134=", "--max-new-tokens", "60",
                 "--spec-tokens", "8", "--spec-draft", draft]) == 0
    out = capsys.readouterr().out
    assert "cumsum:877347649366134=8,15,22,25" in out and f"({draft} drafts)" in out
    assert main(["generate", "--model", str(BASE), "x", "--threshold", "0.5", "--spec-tokens", "8",
                 "--spec-draft", draft]) != 0
    assert "--threshold" in capsys.readouterr().err
    rec = tmp_path / "r.jsonl"
    assert main(["eval", "--model", str(BASE), "--tasks", "long", "--limit", "2", "--batch-size", "1",
                 "--spec-tokens", "8", "--spec-draft", draft, "--max-new-tokens", "60", "--out", str(rec),
                 "--no-progress", *groups]) == 0
    recs = read_records(rec)
    assert len(recs) == 2 and all(r["decode"]["spec_draft"] == draft for r in recs)
    assert decoder_label(recs[0]["decode"]) == label
    assert sum(r["n_tokens"] for r in recs) > 1.5 * sum(r["forwards"]["step"] for r in recs)
