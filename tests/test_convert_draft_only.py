"""The convert recipe's `draft_only` (orl.train.draft_only): the frozen base runs the clean rows, a trained copy
the noisy and draft rows; the run saves the drafter alone, resumes exactly, and the drafter decoded with its
base as verifier gives the base's greedy tokens."""
from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.model.row_split import drafter_of, has_verifier
from orl.model.vocab import special_ids
from orl.train import convert as cv
from orl.train.draft_only import draft_only_model
from test_convert import TOK, base, cut_after_step_2, smoke_cfg  # noqa: F401  (base: a module fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

DRAFT = dict(draft_only=True, freeze_embeddings=True, draft_aux=1.0, draft_tokens=2, draft_stride=2,
             draft_target="ar")


def quiet(*_):
    pass


def test_a_step_trains_the_drafter_only_and_recomputation_does_not_change_it(base):
    """After one optimizer step the base's weights (clean rows) are unchanged and the drafter's moved; with
    activation checkpointing (whose backward recomputes the forward, under the same cut) the step is the same."""
    cfg = smoke_cfg(base, **DRAFT)
    teacher, tok, _, _ = cv.load_base(cfg, torch.device("cpu"))
    cv.build_corpus(tok, cfg.corpus, Path(cfg.data_dir), model=teacher, seed=0, log=quiet)
    streams = cv.read_corpus(Path(cfg.data_dir))
    ids = special_ids(tok, teacher.args.vocab_size)
    after = []
    for recompute in (False, True):
        t = load_checkpoint(cfg.base, dtype=torch.float32)[0]
        model = draft_only_model(cfg, t, None, torch.device("cpu"))
        before = {k: v.clone() for k, v in model.state_dict().items()}
        if recompute:
            cv.checkpoint_blocks(model)
        model.train()
        cuts = []
        model.model.layers[0].mlp.up_proj.register_forward_pre_hook(lambda mod, _: cuts.append(mod.cut.at))
        opt = cv.make_optimizer(model, 1e-2)
        batches = cv.step_batches(cfg, streams, ids, 0, None, model)
        n_batches = len(batches)
        for b in batches:  # rows before the window are clean and never see a row after it
            assert not (b.tokens[:, :cfg.window] == ids.mask).any() and b.tokens.shape[1] > cfg.window
            assert not b.mask[:, :cfg.window, cfg.window:].any()
        cuts.clear()  # the ar targets' clean-window forwards (uncut: the base's) ran above
        cv.train_step(model, opt, batches, cfg, 1e-2)
        # every forward (the recomputing backward's too) is cut at the window: the first row no batch leaves clean
        assert cuts and set(cuts) == {cfg.window} and len(cuts) == (2 if recompute else 1) * n_batches
        state = model.state_dict()
        clean = [k for k in state if ".clean." in k]
        moved = [k for k in state if ".draft." in k and not torch.equal(state[k], before[k])]
        assert clean and all(torch.equal(state[k], before[k]) for k in clean)
        assert moved and not any("embed_tokens" in k for k in moved)  # frozen embeddings (tied: the head too)
        after.append(state)
    for k, v in after[0].items():
        torch.testing.assert_close(v, after[1][k], rtol=1e-5, atol=1e-6, msg=k)


def test_the_run_saves_the_drafter_resumes_exactly_and_decodes_to_the_bases_tokens(base, tmp_path, monkeypatch):
    cfg = smoke_cfg(base, **DRAFT)
    whole = cv.convert(cfg, tmp_path / "whole", log=quiet)
    assert has_verifier(whole)
    cut_after_step_2(cfg, tmp_path / "cut", monkeypatch)
    cv.convert(cfg, tmp_path / "cut", log=quiet)
    saved, _, manifest = load_checkpoint(tmp_path / "cut")
    assert not has_verifier(saved) and manifest["objective"] == "block_diffusion"
    for (n, a), b in zip(drafter_of(whole).state_dict().items(), saved.state_dict().values()):
        assert torch.equal(a, b), n
    assert manifest["recipe"]["verifier"]["base"] == str(Path(cfg.base).resolve())
    base_model = load_checkpoint(cfg.base)[0]  # never written to
    assert torch.equal(saved.model.embed_tokens.weight, base_model.model.embed_tokens.weight)
    assert not torch.equal(saved.model.layers[0].mlp.up_proj.weight, base_model.model.layers[0].mlp.up_proj.weight)
    spec = importlib.util.spec_from_file_location("convert_eval", Path(__file__).parents[1] / "benchmarks" /
                                                  "convert_eval.py")
    ce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ce)
    stream = cv.read_corpus(cfg.data_dir)["code_heldout"]
    res = ce.evaluate_thresholds(cfg.base, str(tmp_path / "cut"), stream, windows=4, context=8, block=4,
                                 thresholds=(), free_tokens=8, free_prompts=2, spec=2, spec_verifier="ar")[0]
    assert res["next_block"]["dlm_block_agrees_with_ar"] == 1.0 and res["free_running"]["position_agreement"] == 1.0


def test_init_from_starts_the_drafter_and_bad_settings_are_named(base, tmp_path):
    cfg = smoke_cfg(base, **DRAFT)
    cv.convert(replace(cfg, steps=2), tmp_path / "first", log=quiet)
    t = load_checkpoint(cfg.base, dtype=torch.float32)[0]
    model = draft_only_model(replace(cfg, init_from=str(tmp_path / "first")), t, None, torch.device("cpu"))
    first = load_checkpoint(tmp_path / "first")[0]
    assert torch.equal(drafter_of(model).model.layers[0].mlp.up_proj.weight, first.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(Exception, match="not a block-diffusion checkpoint"):
        draft_only_model(replace(cfg, init_from=cfg.base), load_checkpoint(cfg.base, dtype=torch.float32)[0], None,
                         torch.device("cpu"))
    with pytest.raises(ValueError, match="freeze_embeddings"):
        replace(cfg, freeze_embeddings=False)
    with pytest.raises(ValueError, match="ar_aux"):
        replace(cfg, ar_aux=0.5)
    with pytest.raises(ValueError, match="init_from is for draft_only"):
        smoke_cfg(base, init_from=str(tmp_path / "first"))


def test_a_draft_only_checkpoint_decodes_only_beside_its_verifier(base, tmp_path, capsys):
    """Alone it is refused by every decoder (its clean rows never trained); `orl generate` attaches the recorded
    verifier, whose greedy tokens it then prints; a verifier whose files changed is refused."""
    from orl.cli import main
    from orl.engine import Engine
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.verifier import attach_verifier

    cfg = smoke_cfg(base, **DRAFT)
    cv.convert(replace(cfg, steps=2), tmp_path / "d", log=quiet)
    model, tok, manifest = load_checkpoint(tmp_path / "d")
    for decoder in (Engine, ARDecoder):
        with pytest.raises(ValueError, match="draft-only conversion"):
            decoder(model, tok, manifest=manifest)
        with pytest.raises(ValueError, match="draft-only conversion"):  # the mark travels with the model
            decoder(model, tok)
    from orl.export import ExportError, export_hf

    with pytest.raises(ExportError, match="draft-only"):
        export_hf(model, tok, tmp_path / "hf", manifest)
    with pytest.raises(ValueError, match="--spec-draft fused"):
        attach_verifier(model, manifest, "d", None, "lookup")
    split = attach_verifier(model, manifest, "d", None, "fused")
    with pytest.raises(ValueError, match="separate verifier"):
        Engine(split, tok, manifest=manifest)
    want = ARDecoder(load_checkpoint(cfg.base)[0], tok).generate(["def f"], ARConfig(max_new_tokens=12))[0]
    assert main(["generate", "def f", "--model", str(tmp_path / "d"), "--spec-draft", "fused", "--spec-tokens", "2",
                 "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.startswith("def f" + want.text + "\n")
    manifest["recipe"]["verifier"]["base_files_sha256"] = "0" * 64
    with pytest.raises(Exception, match="not the verifier"):
        attach_verifier(load_checkpoint(tmp_path / "d")[0], manifest, "d", None, "fused")


def test_draft_accept_scores_a_drafter_against_its_verifier_as_the_run_did(base, tmp_path):
    """benchmarks/draft_accept.py --verifier: the same estimate the run's last periodic eval logged on the same
    windows; without --verifier a draft-only checkpoint is refused."""
    import json

    cfg = smoke_cfg(base, **DRAFT)
    cv.convert(cfg, tmp_path / "d", log=quiet)
    log = [json.loads(x) for x in (tmp_path / "d" / "train.log.jsonl").read_text().splitlines()]
    logged = [r for r in log if "heldout" in r][-1]
    assert logged["step"] == cfg.steps
    spec = importlib.util.spec_from_file_location("draft_accept", Path(__file__).parents[1] / "benchmarks" /
                                                  "draft_accept.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = ["--corpus", cfg.data_dir, "--dlm", str(tmp_path / "d"), "--windows", str(cfg.eval_windows), "--window",
            str(cfg.window), "--context", str(cfg.context), "--k", str(cfg.draft_tokens), "--stride",
            str(cfg.draft_stride), "--out", str(tmp_path / "da.json")]
    assert mod.main(argv + ["--verifier", cfg.base]) == 0
    row = json.loads((tmp_path / "da.json").read_text())[0]
    d = logged["heldout"]["drafts"]
    assert row["agree"] == d["agree"] and row["accepted"] == d["accepted"] and row["cuts"] == d["cuts"]
    with pytest.raises(SystemExit):
        mod.main(argv)
