"""The draft recipe's draft-only form (DraftConfig.draft_only): the base, frozen, runs every clean row and a copy of
it drafts and trains, so the fused decoder's outputs stay the base's token for token while the drafts change; the
run saves the drafter, which records its verifier (relative to the repository for a shipped base) and decodes
only beside it; it resumes exactly."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from orl.checkpoint import CheckpointError, load_checkpoint
from orl.cli import main
from orl.engine.ar import ARDecoder
from orl.engine.ar_step import ARConfig
from orl.model.row_split import draft_rows_from, verify_with
from orl.model.vocab import special_ids
from orl.presets import get_preset
from orl.train.draft import DraftConfig, micro_batches, roll_out, train_draft, update_on
from orl.train.draft_rows import draft_rows
from orl.train.loop import make_optimizer
from orl.train.orl import SHIPPED_BASE
from orl.train.rollout import sample_prompts

pytestmark = pytest.mark.usefixtures("one_thread")

quiet = lambda *_: None  # noqa: E731


def only(**over) -> DraftConfig:
    return DraftConfig(**{**get_preset("draft", "smoke").to_dict(), "draft_only": True, "ar_weight": 0.0, **over})


def test_a_common_clean_width_changes_no_group_logit():
    """draft_rows(clean_width=W): each row's groups start at column W (padding after a shorter sequence) and
    read the same logits as in the row without it; W shorter than a sequence is refused."""
    model, tok, _ = load_checkpoint(SHIPPED_BASE)
    ids = special_ids(tok, model.args.vocab_size)
    seqs = [tok.encode("12+34=46"), tok.encode("5+6=11")]
    starts = [6, 4]
    plain = draft_rows(seqs, starts, 3, ids.mask, ids.pad)
    wide = draft_rows(seqs, starts, 3, ids.mask, ids.pad, clean_width=10)
    assert wide.tokens.shape[1] == 10 + max(len(x) - 1 - s for x, s in zip(seqs, starts)) * 3
    with torch.no_grad():
        a = model(plain.tokens, plain.pos, plain.mask)
        b = model(wide.tokens, wide.pos, wide.mask)
    for r, x in enumerate(seqs):
        n = int(plain.weight[r].sum())
        pa, pb = plain.weight[r].nonzero().flatten(), wide.weight[r].nonzero().flatten()
        assert len(pa) == len(pb) == n and n > 0 and int(pb.min()) >= 10
        torch.testing.assert_close(a[r, pa], b[r, pb], atol=1e-5, rtol=1e-5)
        assert torch.equal(plain.targets[r, pa], wide.targets[r, pb])
    with pytest.raises(ValueError, match="clean_width 5 is shorter than the longest sequence"):
        draft_rows(seqs, starts, 3, ids.mask, ids.pad, clean_width=5)


def test_draft_only_needs_both_ar_weights_at_zero():
    with pytest.raises(ValueError, match="draft_only trains the drafter alone"):
        DraftConfig(draft_only=True)  # ar_weight 0.5 by default
    with pytest.raises(ValueError, match="kl_weight 1.0"):
        DraftConfig(draft_only=True, ar_weight=0.0, kl_weight=1.0)
    assert get_preset("draft", "tiny_draft7_only").draft_only


class GradsOnly:
    """An optimizer that keeps the gradients and moves nothing (Adam's first step, g / (|g| + eps), would turn
    rounding-level gradient differences into full steps)."""

    def __init__(self, model):
        self.model = model

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self):
        pass


def test_a_draft_only_update_moves_the_drafter_only_and_split_micro_batches_agree():
    """One update: the verifier's weights (the clean rows') and the drafter's embeddings do not move, its other
    weights do; the same update split into micro-batches has the same gradients."""
    import copy

    from orl.train.draft import split_model

    base, tok, manifest = load_checkpoint(SHIPPED_BASE)
    dec = ARDecoder(base, tok, manifest=manifest)
    big = only(max_new_tokens=24, engine_max_len=64)
    rolls = roll_out(dec, sample_prompts(("split", "prog", "long"), 4, "mb"), big, seed=0)
    kept = [(dec.encode(r.sample.prompt), r.gen.token_ids) for r in rolls if r.gen.n_tokens >= 2]
    small = DraftConfig(**{**big.to_dict(), "row_tokens": 64 + 24 * 3})
    assert len(micro_batches(kept, small)) > 1 and len(micro_batches(kept, big)) == 1
    ids = special_ids(tok, base.args.vocab_size)
    grads = []
    for cfg in (big, small):
        m, extra = split_model(cfg, copy.deepcopy(base), None, manifest, "cpu")
        assert extra["verifier"]["base"] == "checkpoints/orl-tiny-base"  # portable: a shipped base
        rec = update_on(m.train(), GradsOnly(m), kept, cfg, ids)
        assert rec["draft_ce"] > 0 and rec["ar_ce"] == 0
        grads.append({n: p.grad for n, p in m.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for n, g in grads[0].items():
        assert ".draft." in n and "embed_tokens" not in n and "lm_head" not in n, n  # the drafter's, not its head
        torch.testing.assert_close(g, grads[1][n], atol=1e-6, rtol=1e-5, msg=n)
    m, _ = split_model(big, copy.deepcopy(base), None, manifest, "cpu")
    update_on(m.train(), make_optimizer(m, big.lr), kept, big, ids)
    ref = base.state_dict()
    moved = []
    for n, a in m.state_dict().items():
        plain = n.replace(".clean.", ".").replace(".draft.", ".")
        if ".clean." in n or "embed_tokens" in n or "lm_head" in n:
            assert torch.equal(a, ref[plain]), n
        elif not torch.equal(a, ref[plain]):
            moved.append(n)
    assert moved and all(".draft." in n for n in moved)


def test_a_run_keeps_the_bases_outputs_trains_the_drafts_and_resumes_exactly(tmp_path, capsys, monkeypatch):
    cfg = only()
    whole = train_draft(cfg, tmp_path / "whole", log=quiet)
    drafter, tok, manifest = load_checkpoint(tmp_path / "whole")
    assert manifest["recipe"]["verifier"]["base"] == "checkpoints/orl-tiny-base"
    base = load_checkpoint(SHIPPED_BASE)[0]
    assert any(not torch.equal(a, b) for a, b in zip(drafter.state_dict().values(), base.state_dict().values()))
    with pytest.raises(ValueError, match="draft-only"):  # alone it never decodes (its clean rows never trained)
        ARDecoder(drafter, tok, manifest=manifest)
    # beside its verifier: the base's greedy tokens exactly, from any working directory (the repo-relative record)
    split = verify_with(drafter, base)
    fused = ARConfig(max_new_tokens=24, spec_tokens=3, spec_draft="fused")
    plain = ARDecoder(load_checkpoint(SHIPPED_BASE)[0], tok)
    for p in ("12+34=", "sort: b a c ->"):
        got = ARDecoder(split, tok, manifest=manifest).generate([p], fused)[0]
        assert got.token_ids == plain.generate([p], ARConfig(max_new_tokens=24))[0].token_ids
    monkeypatch.chdir(tmp_path)
    want = plain.generate(["12+34="], ARConfig(max_new_tokens=12))[0].text
    assert main(["generate", "12+34=", "--model", str(tmp_path / "whole"), "--spec-draft", "fused", "--spec-tokens",
                 "3", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.startswith("12+34=" + want + "\n")
    monkeypatch.undo()
    # one update, then the CLI resumes the second: the same drafter as the run in one go
    train_draft(DraftConfig(**{**cfg.to_dict(), "updates": 1}), tmp_path / "cut", log=quiet)
    assert main(["train", "--recipe", "draft", "--preset", "smoke", "--set", "draft_only=true", "--set",
                 "ar_weight=0", "--out", str(tmp_path / "cut")]) == 0
    resumed = load_checkpoint(tmp_path / "cut")[0]
    from orl.model.row_split import drafter_of

    for (n, a), b in zip(drafter_of(whole).state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), n


def test_a_resume_against_a_changed_base_is_refused(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(SHIPPED_BASE, base)
    cfg = only(base=str(base), updates=1)
    train_draft(cfg, tmp_path / "d", log=quiet)
    rec = json.loads((tmp_path / "d" / "orl.json").read_text())["recipe"]["verifier"]
    assert rec["base"] == str(base.resolve())  # outside the repository: absolute
    man = json.loads((base / "orl.json").read_text())
    man["files"]["model.safetensors"] = "0" * 64  # what base_digest reads: another set of files
    (base / "orl.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="files changed since this run began"):
        train_draft(DraftConfig(**{**cfg.to_dict(), "updates": 2}), tmp_path / "d", log=quiet)


def test_draft_rows_from_splits_one_forward_at_the_clean_width():
    """The update's forward with the cut at the clean width: clean columns are the verifier's, group columns the
    drafter's. The drafter differs from the base in its last layer's MLP only, which no K/V depends on, so the
    reference for the group columns is the drafter's own forward, for the clean ones the base's; a drafter that
    differs in its first layer moves both group references apart (the test would see a wrong cut)."""
    import copy

    base, tok, _ = load_checkpoint(SHIPPED_BASE)
    ids = special_ids(tok, base.args.vocab_size)
    seqs = [tok.encode("12+34=46"), tok.encode("5+6=11")]
    rows = draft_rows(seqs, [6, 4], 2, ids.mask, ids.pad, clean_width=8)
    drafter = copy.deepcopy(base)
    with torch.no_grad():
        drafter.model.layers[-1].mlp.down_proj.weight.mul_(0.5)
    split = verify_with(copy.deepcopy(drafter), copy.deepcopy(base), share_equal=False)
    with torch.no_grad(), draft_rows_from(split, 8):
        got = split(rows.tokens, rows.pos, rows.mask)
        want_clean = base(rows.tokens, rows.pos, rows.mask)[:, :8]
        want_draft = drafter(rows.tokens, rows.pos, rows.mask)[:, 8:]
    torch.testing.assert_close(got[:, :8], want_clean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[:, 8:], want_draft, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(want_draft, base(rows.tokens, rows.pos, rows.mask)[:, 8:], atol=1e-4)
    with torch.no_grad(), draft_rows_from(split, 7):  # one clean column on the drafter's weights: a wrong cut
        off = split(rows.tokens, rows.pos, rows.mask)
    assert not torch.allclose(off[:, 7], want_clean[:, 7], atol=1e-4)


def test_a_repo_relative_record_is_the_repositorys_not_the_working_directorys(tmp_path, monkeypatch):
    """A relative verifier record (orl.checkpoint.portable_path wrote it) names the repository's checkpoint even
    when the working directory holds another under that name."""
    from orl.checkpoint import REPO, portable_path, recorded_path
    from orl.verifier import verifier_dir

    (tmp_path / "checkpoints" / "orl-tiny-base").mkdir(parents=True)  # a decoy
    monkeypatch.chdir(tmp_path)
    assert portable_path(SHIPPED_BASE) == "checkpoints/orl-tiny-base"
    assert recorded_path("checkpoints/orl-tiny-base") == REPO / "checkpoints" / "orl-tiny-base"
    assert verifier_dir({"recipe": {"verifier": {"base": "checkpoints/orl-tiny-base"}}}, None) == \
        str(REPO / "checkpoints" / "orl-tiny-base")
    assert recorded_path("only-here") == REPO / "only-here"  # nowhere: the repository's name in the error
    (tmp_path / "only-here").mkdir()
    assert recorded_path("only-here") == Path("only-here")
    assert portable_path(tmp_path) == str(tmp_path.resolve())


def test_draft_only_cannot_change_on_resume(tmp_path):
    train_draft(only(updates=1), tmp_path / "d", log=quiet)
    with pytest.raises(ValueError, match="draft_only cannot change on resume"):
        train_draft(DraftConfig(**{**get_preset("draft", "smoke").to_dict(), "updates": 2}), tmp_path / "d",
                    allow_config_change=True, log=quiet)


def ar_peer(tmp_path, scale: float = 0.9):
    """An AR checkpoint of the shipped base's architecture and tokenizer whose weights differ from the base's
    (embeddings included): a separate verifier."""
    model, tok, manifest = load_checkpoint(SHIPPED_BASE)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(scale)
        model.model.layers[0].mlp.down_proj.weight.mul_(scale)
    from orl.checkpoint import save_checkpoint

    save_checkpoint(model, tok, tmp_path / "ar", {"objective": "autoregressive", "block_len": manifest["block_len"]})
    return tmp_path / "ar"


def test_a_separate_verifier_decides_the_tokens_and_the_drafters_own_head_trains(tmp_path, capsys):
    """verifier=DIR: the AR model's weights run the clean rows (the decode emits its greedy tokens exactly), the
    base drafts with its own embeddings and head, which train (they differ from the verifier's, so the loss must
    read each row's own head); the record names that verifier."""
    ar = ar_peer(tmp_path)
    cfg = only(verifier=str(ar))
    train_draft(cfg, tmp_path / "d", log=quiet)
    drafter, tok, manifest = load_checkpoint(tmp_path / "d")
    assert manifest["recipe"]["verifier"]["base"] == str(ar.resolve())
    base = load_checkpoint(SHIPPED_BASE)[0]
    assert not torch.equal(drafter.model.embed_tokens.weight, base.model.embed_tokens.weight)  # trained, its own
    verifier = load_checkpoint(ar)[0]
    prompt = "sort: b a c ->"  # a prompt on which the verifier's greedy tokens and the base's differ
    plain = ARDecoder(verifier, tok).generate([prompt], ARConfig(max_new_tokens=12))[0]
    assert plain.token_ids != ARDecoder(base, tok).generate([prompt], ARConfig(max_new_tokens=12))[0].token_ids
    assert main(["generate", prompt, "--model", str(tmp_path / "d"), "--spec-draft", "fused", "--spec-tokens", "3",
                 "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.startswith(prompt + plain.text + "\n")


def test_the_loss_reads_the_drafters_head_on_draft_rows():
    """With a verifier whose head differs, the draft term equals the CE under the drafter's head and not under
    the verifier's."""
    import copy

    from orl.train.chunked_ce import chunked_ce_sum
    from orl.train.draft_rows import loss_sums

    base, tok, _ = load_checkpoint(SHIPPED_BASE)
    verifier = copy.deepcopy(base)
    with torch.no_grad():
        verifier.model.embed_tokens.weight.mul_(0.5)
    split = verify_with(copy.deepcopy(base), verifier, share_equal=False)
    ids = special_ids(tok, base.args.vocab_size)
    seqs = [tok.encode("12+34=46")]
    rows = draft_rows(seqs, [6], 2, ids.mask, ids.pad, clean_width=8)
    with torch.no_grad(), draft_rows_from(split, 8):
        d, _, _ = loss_sums(split, rows, torch.zeros_like(rows.weight), 64)
        h = split(rows.tokens, rows.pos, rows.mask, return_hidden=True)
    b, t = (rows.weight > 0).nonzero(as_tuple=True)
    mine = chunked_ce_sum(h[b, t], base.lm_head.weight, rows.targets[b, t], rows.weight[b, t], 64, None)
    theirs = chunked_ce_sum(h[b, t], verifier.lm_head.weight, rows.targets[b, t], rows.weight[b, t], 64, None)
    torch.testing.assert_close(d, mine)
    assert not torch.allclose(d, theirs)


def test_a_verifier_must_share_the_tokenizer_and_needs_draft_only(tmp_path):
    ar = ar_peer(tmp_path)
    with pytest.raises(ValueError, match="is for draft_only runs"):
        DraftConfig(verifier=str(ar))
    t = json.loads((ar / "orl_tokenizer.json").read_text())
    (ar / "orl_tokenizer.json").write_text(json.dumps({**t, "note": "another"}))
    man = json.loads((ar / "orl.json").read_text())
    from orl.atomic_dir import file_digest

    man["files"]["orl_tokenizer.json"] = file_digest(ar / "orl_tokenizer.json")
    (ar / "orl.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="different tokenizer files"):
        train_draft(only(verifier=str(ar)), tmp_path / "d", log=quiet)
