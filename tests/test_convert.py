"""The convert recipe (AR checkpoint -> block diffusion): chunked CE, masked-only loss, no full
logits tensor, the offline corpus, a run from the CLI that resumes exactly."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.model.vocab import special_ids
from orl.presets import get_preset
from orl.tokenizer import CharTokenizer
from orl.train import convert as cv
from orl.train.batches import weighted_ce_sum
from orl.train.chunked_ce import chunked_ce_sum, chunked_predict
from orl.train.corpus import CorpusConfig, code_streams, python_files, split_of

pytestmark = pytest.mark.usefixtures("one_thread")

TOK = CharTokenizer()
V, D = 512, 32  # vocabulary rows beyond the tokenizer's: a head wider than the hidden size


def write_sources(root, n: int = 40) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        body = "".join(f"def f{i}_{j}(x):\n    return x * {i + j} + {j}\n\n" for j in range(6))
        (root / f"m{i}.py").write_text(f"# module {i}\n{body}")
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "copy.py").write_text((root / "m0.py").read_text())  # a duplicate: counted once


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("ar")
    torch.manual_seed(0)
    m = Transformer(ModelArgs(vocab_size=V, dim=D, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                              max_seq_len=128))
    save_checkpoint(m, TOK, d / "base", {"objective": "autoregressive"})
    write_sources(d / "src")
    return d


def smoke_cfg(base, **kw) -> cv.ConvertConfig:
    cfg = get_preset("convert", "smoke")
    return replace(cfg, base=str(base / "base"), data_dir=str(base / "corpus"),
                   corpus=replace(cfg.corpus, roots=(str(base / "src"),)), **kw)


def cut_after_step_2(cfg: cv.ConvertConfig, out, monkeypatch) -> None:
    """A run of cfg into `out` interrupted as step 3 begins (after step 2's checkpoint), as a killed run is."""
    real = cv.make_batches

    def stop_at_3(c, s, i, step, *a):
        if step == 2:
            raise KeyboardInterrupt
        return real(c, s, i, step, *a)

    monkeypatch.setattr(cv, "make_batches", stop_at_3)
    with pytest.raises(KeyboardInterrupt):
        cv.convert(cfg, out, log=lambda *_: None)
    monkeypatch.setattr(cv, "make_batches", real)


@pytest.mark.parametrize("softcap,frozen", [(None, False), (30.0, False), (None, True)])
def test_chunked_ce_equals_full_ce(softcap, frozen):
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float32, requires_grad=True)
    W = torch.randn(300, 16, dtype=torch.float32, requires_grad=not frozen)
    tgt, w = torch.randint(0, 300, (37,)), torch.rand(37, dtype=torch.float32)
    got = chunked_ce_sum(h, W, tgt, w, chunk=8, softcap=softcap)
    got.backward()
    gh, gW = h.grad.clone(), None if frozen else W.grad.clone()
    h.grad, W.grad = None, None
    logits = h @ W.T
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    ref = (torch.nn.functional.cross_entropy(logits, tgt, reduction="none") * w).sum()
    ref.backward()
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-6)  # a sum of 37 CEs ~ 200: fp32 ulp 1.5e-5
    assert torch.allclose(gh, h.grad, atol=1e-5, rtol=0)
    assert frozen or torch.allclose(gW, W.grad, atol=1e-5, rtol=0)
    ce, top = chunked_predict(h.detach(), W.detach(), tgt, chunk=8, softcap=softcap)
    assert torch.allclose(ce, torch.nn.functional.cross_entropy(logits.detach(), tgt, reduction="none"), atol=1e-5)
    assert torch.equal(top, logits.argmax(-1))


def test_within_a_step_the_heads_bf16_cast_is_made_once():
    from orl.train import chunked_ce
    from orl.train.chunked_ce import cast_head, one_cast_per_head

    W = torch.nn.Parameter(torch.randn(300, 16))
    assert cast_head(W, torch.float32).data_ptr() == W.data_ptr()       # its own dtype: no copy at all
    outside = cast_head(W, torch.bfloat16)
    assert cast_head(W, torch.bfloat16) is not outside                 # no scope: a fresh cast each call
    casts = []
    real_to = torch.Tensor.to

    def counting_to(self, *a, **k):
        out = real_to(self, *a, **k)
        if out.dtype == torch.bfloat16 and tuple(self.shape) == (300, 16) and self.dtype == torch.float32:
            casts.append(1)
        return out

    h = torch.randn(37, 16, requires_grad=True)
    tgt, w = torch.randint(0, 300, (37,)), torch.rand(37)
    torch.Tensor.to = counting_to
    try:
        with one_cast_per_head(), torch.autocast("cpu", dtype=torch.bfloat16):
            first = chunked_ce_sum(h, W, tgt, w, chunk=8)
            second = chunked_ce_sum(h, W, tgt, w, chunk=8)
            top = chunked_predict(h.detach(), W, tgt, chunk=8)[1]       # the parameter itself, as the recipe passes it
            first.backward()
    finally:
        torch.Tensor.to = real_to
    assert len(casts) == 1 and not chunked_ce._Casts.held                # one cast in the scope, none kept after it
    # the numbers of a per-call cast: loss, argmax and both gradients
    logits = (h.detach().bfloat16() @ W.detach().bfloat16().T).float()
    ref = (torch.nn.functional.cross_entropy(logits, tgt, reduction="none") * w).sum()
    assert torch.allclose(first, ref, atol=1e-4) and torch.equal(first, second)
    assert torch.equal(top, logits.argmax(-1))
    gh, gW = h.grad.clone(), W.grad.clone()
    h.grad, W.grad = None, None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chunked_ce_sum(h, W, tgt, w, chunk=8).backward()
    assert torch.equal(gh, h.grad) and torch.equal(gW, W.grad)
    with one_cast_per_head():                                            # another head of the same values: its own
        a = cast_head(W, torch.bfloat16)
        assert cast_head(torch.nn.Parameter(W.detach().clone()), torch.bfloat16) is not a
        assert cast_head(W, torch.bfloat16) is a


def diffusion_rows(base, seed=0):
    cfg = smoke_cfg(base)
    model, tok, _ = load_checkpoint(base / "base")
    model = cv.to_diffusion(model).train()
    ids = special_ids(tok, V)
    rows = torch.randint(3, tok.vocab_size, (3, cfg.window), generator=torch.Generator().manual_seed(seed))
    batch = cv.diffusion_batch(cv.row_pairs(rows, cfg.context), cfg.block_len, ids,
                               torch.Generator().manual_seed(seed), eos=False)
    return cfg, model, batch


def test_loss_is_on_masked_positions_only_and_equals_the_full_loss(base):
    cfg, model, batch = diffusion_rows(base)
    assert model.args.shift_logits and batch.weight.sum() > 0
    masked = batch.tokens == TOK.mask_id
    assert torch.equal(batch.weight > 0, masked)  # every loss position is a masked one, and vice versa
    got = cv.masked_loss_sum(model, batch, chunk=4)
    logits = model(batch.tokens, batch.pos, batch.mask, read_from=batch.read_from)
    assert torch.allclose(got, weighted_ce_sum(logits, batch), atol=1e-5)
    # targets where nothing is masked do not matter
    batch.targets = torch.where(masked, batch.targets, (batch.targets + 1) % TOK.vocab_size)
    assert torch.allclose(cv.masked_loss_sum(model, batch, chunk=4), got, atol=1e-6)


class HeadOutputs(TorchDispatchMode):
    """Rows of every matmul output that spans the vocabulary."""

    def __init__(self):
        super().__init__()
        self.rows: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm) and out.shape[-1] == V:
            self.rows.append(out.numel() // V)
        return out


def test_training_step_never_materialises_the_full_logits(base):
    cfg, model, batch = diffusion_rows(base)
    n_masked = int((batch.weight > 0).sum())
    assert n_masked > 4 * 2
    with HeadOutputs() as seen:  # the detector sees a plain forward's [B * T, V] logits
        model(batch.tokens, batch.pos, batch.mask)
    assert max(seen.rows) == batch.tokens.numel()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with HeadOutputs() as seen:
        cv.train_step(model, opt, [batch], replace(cfg, ce_chunk=4), lr=0.0)
    assert seen.rows and max(seen.rows) <= 4 and sum(seen.rows) == n_masked


def test_corpus_is_deduplicated_split_by_hash_deterministic_and_disjoint(base):
    files = python_files((str(base / "src"),), 10**6)
    assert len(files) == 40 and files == python_files((str(base / "src"),), 10**6)
    assert files == sorted(files, key=lambda f: f["sha256"])
    cfg = CorpusConfig(roots=(str(base / "src"),), heldout_frac=0.3, train_tokens=10**6, heldout_tokens=10**6)
    streams, used = code_streams(TOK, cfg)
    splits = {f["sha256"]: f["split"] for f in used}
    assert set(splits.values()) == {"train", "heldout"}
    assert all(split_of(s, 0.3) == sp for s, sp in splits.items())
    assert len(splits) == len(used) == 40
    assert sum(f["tokens"] for f in used if f["split"] == "train") == len(streams["code_train"])
    again, _ = code_streams(TOK, cfg)
    assert all(torch.equal(streams[k], again[k]) for k in streams)


def test_recipe_runs_from_the_cli_and_resumes_exactly(base, tmp_path, monkeypatch):
    from orl.cli import main

    cfg = smoke_cfg(base)
    whole = cv.convert(cfg, tmp_path / "whole", log=lambda *_: None)
    cut_after_step_2(cfg, tmp_path / "cut", monkeypatch)
    argv = ["train", "--recipe", "convert", "--preset", "smoke", "--base", cfg.base, "--out", str(tmp_path / "cut"),
            "--set", f"data_dir={cfg.data_dir}", "--set", f"corpus.roots={cfg.corpus.roots[0]}"]
    assert main(argv) == 0
    resumed, _, manifest = load_checkpoint(tmp_path / "cut")
    for (n, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), n
    assert manifest["objective"] == "block_diffusion" and manifest["block_len"] == cfg.block_len
    assert manifest["layout"] == "absolute_grid"  # so orl generate / eval decode the way the rows trained
    assert manifest["model_args"]["shift_logits"] is True
    rec = manifest["recipe"]
    assert rec["name"] == "convert" and rec["step"] == cfg.steps and rec["base"] == cfg.base
    corpus = json.loads((base / "corpus" / "corpus.json").read_text())
    assert rec["corpus"]["files_sha256"] == corpus["files_sha256"] and corpus["n_files"]["heldout"] > 0
    log = [json.loads(x) for x in (tmp_path / "cut" / "train.log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "step" in r][-2:] == [3, 4] and "heldout" in log[-1]
    # the converted checkpoint decodes under the block-diffusion engine
    from orl.engine import DecodeConfig, Engine

    gen = Engine(resumed, TOK).generate_ids([[5, 6, 7]], DecodeConfig(block_len=4, max_new_tokens=4))[0]
    assert 1 <= len(gen.token_ids) <= 4


def test_time_limit_saves_stops_and_a_rerun_finishes_the_same_run(base, tmp_path):
    """A lease of fixed length: past time_limit_s the run saves the step it finished and stops; the same
    command without the limit (it is resume-free) continues to the weights of an uninterrupted run."""
    cfg = smoke_cfg(base)
    whole = cv.convert(cfg, tmp_path / "whole", log=lambda *_: None)
    said = []
    cv.convert(replace(cfg, time_limit_s=1e-9), tmp_path / "cut", log=said.append)
    assert load_checkpoint(tmp_path / "cut")[2]["recipe"]["step"] == 1  # saved off its save_every cadence
    assert any(f"done: steps 1-1 of {cfg.steps}" in s and "time limit" in s for s in said), said
    resumed = cv.convert(cfg, tmp_path / "cut", log=lambda *_: None)
    for (n, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), n
    with pytest.raises(ValueError, match="time_limit_s"):
        replace(cfg, time_limit_s=-1.0)


def test_bad_settings_are_named(base):
    with pytest.raises(ValueError, match="multiple of block_len"):
        replace(smoke_cfg(base), window=25)
    with pytest.raises(ValueError, match="distill"):
        replace(smoke_cfg(base), mix=(1, 0, 1))
    with pytest.raises(ValueError, match="unknown layout"):
        replace(smoke_cfg(base), layout="grid")
    with pytest.raises(ValueError, match="absolute_grid needs context"):
        replace(smoke_cfg(base), context=6, window=26)
    assert replace(smoke_cfg(base), context=6, window=26, layout="prompt_block").layout == "prompt_block"
    with pytest.raises(ValueError, match="--base"):
        cv.convert(replace(smoke_cfg(base), base=""), base / "none")


def test_distill_stream_is_the_teachers_own_greedy_continuations(base, tmp_path):
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.train.corpus import build_corpus

    model, tok, _ = load_checkpoint(base / "base")
    cfg = CorpusConfig(roots=(str(base / "src"),), heldout_frac=0.3, train_tokens=5_000, heldout_tokens=2_000,
                       tasks=("constr",), task_samples=3, distill_prompts=4, distill_prompt_tokens=6,
                       distill_new_tokens=5)
    streams = build_corpus(tok, cfg, tmp_path / "c", model=model, log=lambda *_: None)
    assert torch.equal(streams["distill"], build_corpus(tok, cfg, tmp_path / "c")["distill"])  # read back, no teacher
    # the first document: a code prompt of 6 tokens, then the decoder's continuation of it
    first = streams["distill"][:6].tolist()
    gen = ARDecoder(model, tok).generate_ids([first], ARConfig(max_new_tokens=5))[0]
    assert streams["distill"][6:6 + gen.n_tokens].tolist() == gen.token_ids
    assert len(streams["tasks"]) > 0 and json.loads((tmp_path / "c" / "corpus.json").read_text())["tokens"]["distill"] > 0


def test_two_runs_building_the_same_corpus_at_once_both_finish(base, tmp_path, monkeypatch):
    """Two jobs launched together with one corpus key (an lr sweep) build the same directory at once. With
    one shared tokens.tmp the second rename found no file (FileNotFoundError) - or moved a file still being
    written. Forced here: both have written their token file before either renames it."""
    import threading

    import orl.train.corpus as corpus_mod

    cfg = CorpusConfig(roots=(str(base / "src"),), heldout_frac=0.3, train_tokens=2_000, heldout_tokens=500)
    real, both_written = corpus_mod.save_file, threading.Barrier(2, timeout=60)

    def save_file(*a, **kw):
        real(*a, **kw)
        both_written.wait()

    monkeypatch.setattr(corpus_mod, "save_file", save_file)
    results, errors = [], []

    def job():
        try:
            results.append(corpus_mod.build_corpus(TOK, cfg, tmp_path / "c", log=lambda *_: None))
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    jobs = [threading.Thread(target=job) for _ in range(2)]
    for t in jobs:
        t.start()
    for t in jobs:
        t.join()
    assert errors == [] and len(results) == 2
    again = corpus_mod.read_corpus(tmp_path / "c")
    assert all(torch.equal(again[k], r[k]) for r in results for k in again)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["corpus.json", "tokens.safetensors"]


def test_character_bases_with_other_alphabets_get_other_corpus_keys(tmp_path):
    """Without distillation the key holds the tokenizer's digest alone; a character base's tokenizer is
    orl_tokenizer.json, which a 'tokenizer' prefix missed: two alphabets (the same text, other ids) shared
    one corpus directory, and the second run trained on ids of the first one's alphabet."""
    from orl.tokenizer import PRINTABLE
    from orl.train.convert_base import base_digest
    from orl.train.corpus import corpus_key

    keys = []
    for name, tok in (("a", CharTokenizer(PRINTABLE)), ("b", CharTokenizer(PRINTABLE[::-1]))):
        m = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=D, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=64))
        save_checkpoint(m, tok, tmp_path / name, {"objective": "autoregressive"})
        manifest = json.loads((tmp_path / name / "orl.json").read_text())
        keys.append(corpus_key(CorpusConfig(), base_digest(tmp_path / name, manifest, "tokenizer"), None, 0))
    assert CharTokenizer(PRINTABLE).encode("ab") != CharTokenizer(PRINTABLE[::-1]).encode("ab")
    assert keys[0] != keys[1]


def test_the_bases_eos_ids_stay_in_the_converted_checkpoint(base, tmp_path):
    """A base whose orl.json lists a second EOS id (a chat model's end-of-turn token; 7 here, a byte
    token of the character tokenizer): the converted model's orl.json keeps it, so its rows still stop
    there (the output listed none, so loading it gave eos_ids (1,))."""
    import shutil

    shutil.copytree(base / "base", tmp_path / "base")
    manifest = json.loads((tmp_path / "base" / "orl.json").read_text())
    (tmp_path / "base" / "orl.json").write_text(json.dumps({**manifest, "eos_ids": [1, 7]}))
    cv.convert(replace(smoke_cfg(base), base=str(tmp_path / "base")), tmp_path / "out", log=lambda *_: None)
    assert json.loads((tmp_path / "out" / "orl.json").read_text())["eos_ids"] == [1, 7]
    assert load_checkpoint(tmp_path / "out")[1].eos_ids == (1, 7)
