"""`draft_rank` (orl.train.draft_lora): a draft-only run whose drafter is the base's linears plus a trained rank-r
delta. Only the factors (and the drafter's norms) train, the base's rows stay the base's, the checkpoint is a plain
drafter (W + B A) plus the factors, a resumed run continues exactly, and the drafter decodes to the base's tokens."""
from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from orl.checkpoint import load_checkpoint
from orl.model.draft_delta import DraftDelta
from orl.model.row_split import draft_rows_from, drafter_of, params_outside_units
from orl.model.vocab import special_ids
from orl.train import convert as cv
from orl.train.draft_lora import (ADAPTER_FILE, adapter_shapes, deltas, drafter_from_adapter, read_factors,
                                  trainable_low_rank)
from orl.train.draft_only import draft_only_model
from test_convert import TOK, base, cut_after_step_2, smoke_cfg  # noqa: F401  (base: a module fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

LORA = dict(draft_only=True, freeze_embeddings=True, draft_aux=1.0, draft_tokens=2, draft_stride=2,
            draft_target="ar", draft_rank=2)


def quiet(*_):
    pass


def test_only_the_factors_and_norms_train_and_the_drafter_starts_as_the_base(base):
    cfg = smoke_cfg(base, **LORA)
    teacher, tok, _, _ = cv.load_base(cfg, torch.device("cpu"))
    model = draft_only_model(cfg, teacher, None, torch.device("cpu"))
    units = deltas(model)
    n_lin = sum(isinstance(m, torch.nn.Linear) for m in load_checkpoint(cfg.base)[0].model.layers.modules())
    assert len(units) == n_lin and all(m.a.shape[0] == 2 and not m.b.any() for m in units.values())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith((".a", ".b")) or ".draft." in n for n in trainable)
    assert not any(n.endswith(".weight") and "proj" in n for n in trainable)     # no big matrix trains
    assert not any(p.requires_grad for p in params_outside_units(model))         # A and B are not "outside"
    # B = 0: the drafter is the base exactly (its shifted read-out aside), so the first step starts from it
    d, b = drafter_of(model), load_checkpoint(cfg.base)[0]
    for (n, x), y in zip(d.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), n
    # one step moves B (A's gradient is B^T(...) = 0 at the start), never the base's rows
    cv.build_corpus(tok, cfg.corpus, Path(cfg.data_dir), model=teacher, seed=0, log=quiet)
    streams = cv.read_corpus(Path(cfg.data_dir))
    ids = special_ids(tok, teacher.args.vocab_size)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    opt = cv.make_optimizer(model, 1e-2)
    cv.train_step(model, opt, cv.step_batches(cfg, streams, ids, 0, None, model), cfg, 1e-2)
    after = model.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in after if ".clean." in k)
    assert any(not torch.equal(after[k], before[k]) for k in after if k.endswith(".b"))
    assert all(torch.equal(after[k], before[k]) for k in after if k.endswith(".a"))   # dL/dA = B^T(...) = 0 here
    cv.train_step(model, opt, cv.step_batches(cfg, streams, ids, 1, None, model), cfg, 1e-2)
    assert any(not torch.equal(model.state_dict()[k], before[k]) for k in after if k.endswith(".a"))  # now A moves


def test_the_rows_before_the_cut_never_see_the_delta(base):
    """The output is the base's only if the verify rows are: with B != 0 a forward cut at row c gives, on rows < c,
    the logits of the same model with B = 0 bit for bit, and other logits from row c on."""
    cfg = smoke_cfg(base, **LORA)
    model = draft_only_model(cfg, load_checkpoint(cfg.base, dtype=torch.float32)[0], None, torch.device("cpu")).eval()
    tokens = torch.randint(4, 60, (2, 12), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(12)[None].expand(2, -1)
    mask = torch.ones(12, 12, dtype=torch.bool).tril()[None].expand(2, -1, -1)
    cut = 7

    def logits():
        with torch.no_grad(), draft_rows_from(model, cut):
            return model(tokens, pos, mask)

    zero = logits()
    with torch.no_grad():
        for m in deltas(model).values():
            m.b.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    moved = logits()
    assert torch.equal(moved[:, :cut], zero[:, :cut])
    assert not torch.allclose(moved[:, cut:], zero[:, cut:])


def test_the_run_saves_merged_weights_and_factors_resumes_exactly_and_decodes_to_the_bases_tokens(
        base, tmp_path, monkeypatch):
    cfg = smoke_cfg(base, **LORA)
    whole = cv.convert(cfg, tmp_path / "whole", log=quiet)
    cut_after_step_2(cfg, tmp_path / "cut", monkeypatch)
    cv.convert(cfg, tmp_path / "cut", log=quiet)
    saved, _, manifest = load_checkpoint(tmp_path / "cut")
    factors = load_file(tmp_path / "cut" / ADAPTER_FILE)
    for name, m in deltas(whole).items():       # the resumed run's factors are the uninterrupted run's
        assert torch.equal(factors[f"{name}.a"], m.a.detach()) and torch.equal(factors[f"{name}.b"], m.b.detach())
    for (n, a), b in zip(drafter_of(whole).state_dict().items(), saved.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m: f"{n}: {m}")
    # the merged weight is W + B A of the saved factors
    base_model = load_checkpoint(cfg.base)[0]
    p = "model.layers.0.mlp.up_proj"
    want = base_model.get_submodule(p).weight + factors[f"{p}.b"] @ factors[f"{p}.a"]
    torch.testing.assert_close(saved.get_submodule(p).weight, want)
    assert not torch.equal(saved.get_submodule(p).weight, base_model.get_submodule(p).weight)
    assert manifest["recipe"]["config"]["draft_rank"] == 2
    # the base and the adapter file alone (the factors and the drafter's norms) give the saved drafter exactly
    rebuilt = drafter_from_adapter(cfg.base, tmp_path / "cut")
    for (n, a), b in zip(rebuilt.state_dict().items(), saved.state_dict().values()):
        assert torch.equal(a, b), n
    assert any(".draft." in k and "norm" in k for k in factors)   # the norms trained and travel with the factors
    spec = importlib.util.spec_from_file_location("convert_eval", Path(__file__).parents[1] / "benchmarks" /
                                                  "convert_eval.py")
    ce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ce)
    stream = cv.read_corpus(cfg.data_dir)["code_heldout"]
    for rank in (None, 2):   # as a full drafter, and rebuilt at its own rank (the SVD of B A)
        res = ce.evaluate_thresholds(cfg.base, str(tmp_path / "cut"), stream, windows=4, context=8, block=4,
                                     thresholds=(), free_tokens=8, free_prompts=2, spec=2, spec_verifier="ar",
                                     **({"draft_rank": rank} if rank else {}))[0]
        assert res["next_block"]["dlm_block_agrees_with_ar"] == 1.0
        assert res["free_running"]["position_agreement"] == 1.0


def test_a_factor_file_that_does_not_fit_is_refused_and_bad_settings_are_named(base, tmp_path):
    cfg = smoke_cfg(base, **LORA)
    cv.convert(replace(cfg, steps=2), tmp_path / "d", log=quiet)
    f = tmp_path / "d" / ADAPTER_FILE
    good = load_file(f)
    model = draft_only_model(cfg, load_checkpoint(cfg.base, dtype=torch.float32)[0], None, torch.device("cpu"))
    want = adapter_shapes(model, 2)
    assert set(read_factors(tmp_path / "d", want, 2)) == set(good)
    with pytest.raises(ValueError, match="does not fit"):              # rank 2 factors for a rank-3 run
        read_factors(tmp_path / "d", adapter_shapes(model, 3), 3)
    meta = {"format": "orl-draft-delta", "rank": "2"}
    cases = {"missing": ({k: v for k, v in list(good.items())[1:]}, meta),
             "unknown": ({**good, "model.extra.a": torch.zeros(2, 2)}, meta),
             "other dtype": ({k: v.half() for k, v in good.items()}, meta),
             "non-finite": ({k: v * float("nan") for k, v in good.items()}, meta),
             "metadata": (good, {"format": "something else", "rank": "2"})}
    for what, (tensors, md) in cases.items():
        save_file(tensors, f, metadata=md)
        with pytest.raises(ValueError, match=what):
            read_factors(tmp_path / "d", want, 2)
    f.write_bytes((2).to_bytes(8, "little") + b"[]")                   # a header that is JSON but no object
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        read_factors(tmp_path / "d", want, 2)
    f.write_bytes((10**9).to_bytes(8, "little") + b"{}")               # a header size past the file's end
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        read_factors(tmp_path / "d", want, 2)
    save_file(good, f, metadata=meta)
    data = bytearray(f.read_bytes())
    f.write_bytes(bytes(data[:-4]))                                     # a body cut short: offsets past its end
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        read_factors(tmp_path / "d", want, 2)
    f.unlink()
    with pytest.raises(Exception, match="draft_delta.safetensors"):    # a resume without its factors
        draft_only_model(cfg, load_checkpoint(cfg.base, dtype=torch.float32)[0],
                         load_checkpoint(tmp_path / "d", dtype=torch.float32)[0], torch.device("cpu"),
                         resume_dir=tmp_path / "d")
    with pytest.raises(ValueError, match="draft_rank is for draft_only"):
        smoke_cfg(base, draft_rank=2)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="draft_rank"):
            smoke_cfg(base, **{**LORA, "draft_rank": bad})
    assert isinstance(model.model.layers[0].mlp.up_proj, DraftDelta)


def test_a_drafter_whose_bias_moved_is_refused(base):
    """A low-rank delta holds no bias: an init_from drafter whose conversion trained a bias cannot be one."""
    from orl.model.row_split import verify_with
    from orl.train.convert_base import to_diffusion

    teacher = load_checkpoint(base / "base", dtype=torch.float32)[0]
    drafter = to_diffusion(load_checkpoint(base / "base", dtype=torch.float32)[0])
    lin = drafter.model.layers[0].mlp.up_proj
    lin.bias = torch.nn.Parameter(torch.ones(lin.out_features))
    teacher.model.layers[0].mlp.up_proj.bias = torch.nn.Parameter(torch.zeros(lin.out_features))
    model = verify_with(drafter, teacher, share_equal=False)
    with pytest.raises(ValueError, match="bias differs"):
        trainable_low_rank(model, 2, 0)


def test_the_adapter_rebuilds_only_on_its_own_base(base, tmp_path):
    from orl.checkpoint import save_checkpoint

    cfg = smoke_cfg(base, **LORA)
    cv.convert(replace(cfg, steps=2), tmp_path / "d", log=quiet)
    other, tok, _ = load_checkpoint(cfg.base, dtype=torch.float32)
    with torch.no_grad():
        other.model.layers[0].mlp.up_proj.weight.add_(1e-3)             # same shapes, other weights
    save_checkpoint(other, tok, tmp_path / "other", {"objective": "autoregressive"})
    with pytest.raises(ValueError, match="not the base"):
        drafter_from_adapter(tmp_path / "other", tmp_path / "d")


def test_init_from_with_draft_rank_resumes_exactly(base, tmp_path, monkeypatch):
    """The SVD start (init_from) resumes bit for bit too: LAPACK's column-major factors are copied row-major."""
    full = smoke_cfg(base, **{**LORA, "draft_rank": 0})
    cv.convert(replace(full, steps=2), tmp_path / "first", log=quiet)
    cfg = replace(smoke_cfg(base, **LORA), init_from=str(tmp_path / "first"))
    whole = cv.convert(cfg, tmp_path / "whole", log=quiet)
    cut_after_step_2(cfg, tmp_path / "cut", monkeypatch)
    cv.convert(cfg, tmp_path / "cut", log=quiet)
    factors = load_file(tmp_path / "cut" / ADAPTER_FILE)
    for name, m in deltas(whole).items():
        assert torch.equal(factors[f"{name}.a"], m.a.detach()) and torch.equal(factors[f"{name}.b"], m.b.detach())
    assert any(m.b.detach().abs().sum() > 0 for m in deltas(whole).values())


def test_a_split_matrix_outside_the_linears_is_refused(base):
    """Only the blocks' linears become low-rank: a split unit that is a matrix (here a stand-in) would train whole."""
    cfg = smoke_cfg(base, **LORA)
    model = draft_only_model(replace(cfg, draft_rank=0), load_checkpoint(cfg.base, dtype=torch.float32)[0], None,
                             torch.device("cpu"))
    norm = model.model.layers[0].input_layernorm.draft
    norm.extra = torch.nn.Parameter(torch.ones(3, 3))
    with pytest.raises(ValueError, match="train whole"):
        trainable_low_rank(model, 2, 0)
