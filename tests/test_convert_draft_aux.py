"""The convert recipe's `draft_aux`: the same windows as draft rows (orl.train.draft_rows, the fused self-draft's
geometry), teacher forced on the text, beside the diffusion rows; they carry ar_aux's next-token term in the same
forward. So a conversion can train the drafts its self-speculative decoder reads (issue 22)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.model.vocab import special_ids
from orl.train import convert as cv
from orl.train.batches import next_token_batch
from orl.train.draft_rows import corpus_draft_batch, draft_rows, loss_sums, with_ar_targets
from test_convert import TOK, base, smoke_cfg  # noqa: F401  (base: a module fixture)
from test_convert_ar_aux import run  # noqa: F401  (a converted model and the smoke corpus)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_batches_carry_both_terms_and_leave_the_diffusion_rows_alone(base, run):
    cfg, streams = smoke_cfg(base), run[1]
    ids = special_ids(TOK, 512)
    plain = cv.make_batches(cfg, streams, ids, step=3)
    both = cv.make_batches(replace(cfg, ar_aux=0.5, draft_aux=2.0, draft_tokens=2, draft_stride=3), streams, ids, step=3)
    n = len(plain)
    assert n and len(both) == 2 * n  # one draft batch per stream, no separate causal rows
    for a, b in zip(plain, both[:n]):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.weight, b.weight)
    for d, x in zip(plain, both[n:]):
        W = cfg.window
        assert torch.equal(x.tokens[:, :cfg.context], d.tokens[:, :cfg.context])  # the same windows
        assert (x.weight[:, :W - 1] == 0.5).all() and x.weight[:, W - 1].eq(0).all()
        groups = x.weight[:, W:]
        n_cuts = len(range(cfg.context, W - 1, 3))
        assert x.tokens.shape[1] == W + 2 * n_cuts and set(groups.unique().tolist()) <= {0.0, 2.0}
        assert (x.tokens[:, W:] == ids.mask).all()
        assert int((groups > 0).sum()) == sum(  # each cut c predicts x[c+1] and x[c+2] when inside the row
            (c + 1 < W) + (c + 2 < W) for c in range(cfg.context, W - 1, 3)) * x.tokens.shape[0]


def test_the_terms_are_next_token_batch_and_draft_rows_losses(run):
    model = load_checkpoint(run[0])[0]
    rows = torch.randint(5, TOK.vocab_size, (2, 14), generator=torch.Generator().manual_seed(1))
    ar_only = corpus_draft_batch(rows, 6, 3, 2, 3, 0, draft_weight=0.0, ar_weight=1.0)
    causal = next_token_batch(rows)
    torch.testing.assert_close(cv.masked_loss_sum(model, ar_only, 4), cv.masked_loss_sum(model, causal, 4),
                               rtol=1e-5, atol=1e-4)
    draft_only = corpus_draft_batch(rows, 6, 3, 2, 3, 0, draft_weight=1.0)
    ref = draft_rows(rows.tolist(), [6, 6], 3, 3, 0, 2)
    with torch.no_grad():
        want = loss_sums(model, ref, torch.zeros_like(ref.weight), 4)[0]
    torch.testing.assert_close(cv.masked_loss_sum(model, draft_only, 4), want, rtol=1e-5, atol=1e-4)


def test_ar_targets_are_the_causal_forwards_greedy_tokens(run):
    """draft_target "ar": each draft position's target is the argmax of the plain causal forward at its own
    position (what the AR path emits there); the clean positions keep the text; weights do not change."""
    model = load_checkpoint(run[0])[0]
    rows = torch.randint(5, TOK.vocab_size, (2, 14), generator=torch.Generator().manual_seed(2))
    b = corpus_draft_batch(rows, 6, 3, 2, 3, 0, draft_weight=1.0, ar_weight=0.5)
    got = with_ar_targets(model, b, 14, chunk=5)
    with torch.no_grad():
        greedy = model(rows, torch.arange(14)[None].expand(2, -1), torch.ones(14, 14, dtype=torch.bool).tril()[None]
                       ).argmax(-1)                                                      # [2, 14]
    assert torch.equal(got.targets[:, :14], b.targets[:, :14]) and torch.equal(got.weight, b.weight)
    g = b.weight[:, 14:] > 0
    want = greedy.gather(1, b.pos[:, 14:].clamp(max=13))
    assert g.any() and torch.equal(got.targets[:, 14:][g], want[g])
    assert not torch.equal(got.targets[:, 14:][g], b.targets[:, 14:][g])  # random text: the AR path disagrees


@pytest.mark.parametrize("target", ["text", "ar"])
def test_a_run_with_draft_aux_trains_and_bad_values_are_named(base, tmp_path, target):
    cfg = smoke_cfg(base, ar_aux=0.5, draft_aux=1.0, draft_tokens=2, draft_stride=2, draft_target=target)
    model = cv.convert(cfg, tmp_path / "run", log=lambda *_: None)
    _, _, manifest = load_checkpoint(tmp_path / "run")
    assert manifest["recipe"]["config"]["draft_target"] == target and model.args.shift_logits
    for bad in ({"draft_aux": -1.0}, {"draft_tokens": 0}, {"draft_stride": 0}, {"draft_target": "soft"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            smoke_cfg(base, **bad)
    with pytest.raises(ValueError, match=r"invalid ConvertConfig: window - context"):  # named, not an anchors() error
        smoke_cfg(base, draft_aux=1.0, context=cfg.window)
    with pytest.raises(ValueError, match="exceed 4 x window"):
        smoke_cfg(base, draft_aux=1.0, draft_tokens=64, draft_stride=1)


def test_heldout_eval_and_the_benchmark_report_draft_acceptance(base, run, tmp_path):
    """convert's periodic eval logs the drafts' estimated acceptance; benchmarks/draft_accept.py gives the same
    numbers for the checkpoint on the same windows (its rows are exact counts, not means of means)."""
    import importlib.util
    import json
    from pathlib import Path

    log = [json.loads(x) for x in (run[0] / "train.log.jsonl").read_text().splitlines()]
    ev = [r["heldout"] for r in log if "heldout" in r][-1]
    d = ev["drafts"]
    assert len(d["agree"]) == 3 and d["cuts"] > 0 and d["tpf_estimate"] == round(1 + d["accepted"], 4)
    spec = importlib.util.spec_from_file_location(
        "draft_accept", Path(__file__).resolve().parents[1] / "benchmarks" / "draft_accept.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = smoke_cfg(base)
    out = tmp_path / "da.json"
    assert mod.main(["--corpus", cfg.data_dir, "--dlm", str(run[0]), "--windows", "4", "--window", str(cfg.window),
                     "--context", str(cfg.context), "--k", "2", "--stride", "3", "--batch", "3", "--out", str(out)]) == 0
    row = json.loads(out.read_text())[0]
    model = load_checkpoint(run[0])[0]
    from orl.train.corpus import fixed_windows, read_corpus
    from orl.train.draft_eval import draft_agreement

    rows = fixed_windows(read_corpus(cfg.data_dir)["code_heldout"], 4, cfg.window)
    whole = draft_agreement(model, rows, cfg.context, 2, 3, TOK.mask_id, TOK.pad_id)
    assert row["cuts"] == whole["cuts"] and row["agree"] == whole["agree"] and row["accepted"] == whole["accepted"]
