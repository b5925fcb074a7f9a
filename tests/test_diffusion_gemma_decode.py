"""DiffusionGemma decoding in dlmrt's canvas mode (orl.engine.canvas) is token-identical to
transformers' DiffusionGemmaForBlockDiffusion.generate() when transformers' random calls replay
orl's counter-based draws (its torch.randint canvases and torch.multinomial samples are patched to
return orl's uniform tokens and Gumbel-max samples with the same noise): prompt longer than the
window, several canvases, the stopping rule with rows that stop at different steps, EOS and pad."""
from __future__ import annotations

import torch
import pytest

from diffusion_gemma_fixture import CANVAS, EOS, PAD, VOCAB, write_diffusion_gemma
from orl.checkpoint import load_checkpoint
from orl.engine.canvas import (INIT, RENOISE, SAMPLE, CanvasConfig, CanvasDecoder, draw_counter, entropy,
                               entropy_bound_accept, gumbel_noise, uniform_tokens)

pytestmark = pytest.mark.usefixtures("one_thread")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("diffusion_gemma")
    hf = write_diffusion_gemma(d)
    return d, hf


def _replayed_generate(hf, monkeypatch, prompt: torch.Tensor, seeds: list[int], cfg: CanvasConfig, eos: int,
                       attention_mask=None) -> torch.Tensor:
    """transformers' generate with its draws replaced by orl's, in the order it makes them: per canvas
    one randint (the start), then per step a multinomial (the samples) and a randint (the renoise)."""
    seed, N = torch.tensor(seeds), cfg.max_denoising_steps
    at = {"block": -1, "step": 0, "last": None}

    def randint(low=0, high=None, size=None, device=None, **kw):
        if at["last"] == "multinomial":
            counter = draw_counter(at["block"], at["step"], RENOISE, N)
            at["step"] += 1
        else:
            at["block"], at["step"] = at["block"] + 1, 0
            counter = draw_counter(at["block"], 0, INIT, N)
        at["last"] = "randint"
        assert high == VOCAB and size == (len(seeds), CANVAS)
        return uniform_tokens(seed, counter, CANVAS, VOCAB)

    def multinomial(probs, num_samples, **kw):
        at["last"] = "multinomial"
        u = gumbel_noise(seed, draw_counter(at["block"], at["step"], SAMPLE, N), CANVAS, VOCAB)
        return (probs.log().view(len(seeds), CANVAS, VOCAB) - torch.log(-torch.log(u))).argmax(-1).view(-1, 1)

    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

    with monkeypatch.context() as m:
        m.setattr(torch, "randint", randint)
        m.setattr(torch, "multinomial", multinomial)
        kw = {} if attention_mask is None else {"attention_mask": attention_mask}
        out = hf.generate(prompt, max_new_tokens=cfg.max_new_tokens, max_denoising_steps=N,
                          t_min=cfg.t_min, t_max=cfg.t_max, sampler_config=EntropyBoundSamplerConfig(cfg.entropy_bound),
                          stability_threshold=cfg.stability_threshold,
                          confidence_threshold=cfg.confidence_threshold, eos_token_id=eos, pad_token_id=PAD, **kw)
    return out.sequences[:, prompt.shape[1]:]


def _cut(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def _ours(d, prompts, cfg, seeds, eos):
    model, tok, manifest = load_checkpoint(d)
    dec = CanvasDecoder(model, tok, manifest={**manifest, "eos_ids": [eos]})
    return dec.generate_ids(prompts, cfg, seeds=seeds)


def test_one_row_matches_transformers(written, monkeypatch):
    d, hf = written
    prompt = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(3))
    cfg = CanvasConfig(max_new_tokens=3 * CANVAS, max_denoising_steps=6)
    gen = _ours(d, prompt.tolist(), cfg, [11], EOS)[0]
    ref = _replayed_generate(hf, monkeypatch, prompt, [11], cfg, EOS)[0].tolist()
    assert gen.token_ids == _cut(ref, EOS) and len(ref) == 3 * CANVAS
    assert gen.step_forwards == 3 * 6 and gen.commit_forwards == 2


STOPS = {  # two ways a canvas stops early, each at different steps for different rows / canvases
    # confidence alone (stability_threshold 0): the mean entropy falls below 2.5 nats at some steps
    "confident": dict(stability_threshold=0, confidence_threshold=2.5),
    # stability: accept every sample at a low temperature, so the argmax canvas reaches a fixed point
    "stable": dict(entropy_bound=100.0, t_min=0.01, t_max=0.02, confidence_threshold=50.0),
}


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_stopping_rule_and_eos_match_transformers(written, monkeypatch, stop):
    """Two rows; EOS is a token the first row's second canvas holds without EOS, so it stops there
    (transformers pads the rest, orl cuts there) while the other row runs on."""
    d, hf = written
    prompts = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(4))
    cfg = CanvasConfig(max_new_tokens=4 * CANVAS, max_denoising_steps=8, chunk_steps=1, **STOPS[stop])
    free = _ours(d, prompts.tolist(), cfg, [5, 6], EOS)
    eos = free[0].token_ids[CANVAS + 1]
    gens = _ours(d, prompts.tolist(), cfg, [5, 6], eos)
    refs = _replayed_generate(hf, monkeypatch, prompts, [5, 6], cfg, eos)
    for gen, ref in zip(gens, refs.tolist()):
        assert gen.token_ids == _cut(ref, eos)
        if eos in ref:
            assert set(ref[ref.index(eos) + 1:]) <= {PAD}
    assert gens[0].finished and len(gens[0].token_ids) <= 2 * CANVAS
    steps = gens[0].block_steps + gens[1].block_steps
    assert min(steps) < cfg.max_denoising_steps and len(set(steps)) > 1, steps  # stopped, at different steps


def test_draws_are_per_row_and_in_range():
    seed = torch.tensor([1, 2, 1])
    t = uniform_tokens(seed, draw_counter(0, 0, INIT, 8), 50, 7)
    assert t.min() >= 0 and t.max() < 7 and torch.equal(t[0], t[2]) and not torch.equal(t[0], t[1])
    assert not torch.equal(t, uniform_tokens(seed, draw_counter(0, 0, RENOISE, 8), 50, 7))


def test_entropy_bound_acceptance_by_hand():
    ent = torch.tensor([[0.30, 0.01, 0.05, 0.02]])
    # sorted 0.01 0.02 0.05 0.30: cumsum - own = 0, 0.01, 0.03, 0.08 -> with bound 0.05 the first three
    assert entropy_bound_accept(ent, 0.05).tolist() == [[False, True, True, True]]
    assert entropy_bound_accept(ent, 0.02).tolist() == [[False, True, False, True]]
    uniform = torch.zeros(1, 1, 8)
    torch.testing.assert_close(entropy(uniform), torch.log(torch.tensor([[8.0]])))


def test_bad_config_named():
    with pytest.raises(ValueError, match="t_min < t_max"):
        CanvasConfig(t_min=0.9, t_max=0.5).validate()
    cfg = CanvasConfig.from_generation_config({"max_denoising_steps": 12, "sampler_config": {"entropy_bound": 0.3,
                                                                                             "_cls_name": "x"}})
    assert cfg.max_denoising_steps == 12 and cfg.entropy_bound == 0.3


def test_orl_generate_runs(written, capsys):
    """`orl generate` on the save_pretrained directory: the canvas mode with generation_config.json's
    settings (transformers wrote nulls: the defaults) and the flags that apply."""
    from orl.cli import main

    rc = main(["generate", "--model", str(written[0]), "hi", "--max-new-tokens", "6", "--steps-per-block", "3"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "diffusion_gemma canvas 4, <= 3 steps" in out.out and "denoise + 1 encode" in out.out
    assert "forwards: 7 (6 denoise" in out.out  # two canvases (6 tokens) of at most 3 steps


@pytest.mark.parametrize("flags, named", [
    (["--temperature", "0.5"], "--temperature"), (["--rule", "topk"], "--rule"), (["--threshold", "0.5"], "--threshold"),
    (["--top-k", "3"], "--top-k"), (["--residual", "rcd"], "--residual"), (["--compile"], "--compile"),
    (["--block-len", "8", "--factor", "2"], "--factor, --block-len")])
def test_orl_generate_refuses_flags_without_a_use_by_name(written, capsys, flags, named):
    """A decode flag canvas decoding has no use for is refused by name (exit 2, one line, nothing
    decoded), as `orl eval` refuses it, instead of being ignored."""
    from orl.cli import main

    rc = main(["generate", "--model", str(written[0]), "hi", "--max-new-tokens", "4", *flags])
    out = capsys.readouterr()
    assert rc == 2 and out.out == "", out
    assert out.err.count("\n") == 1 and f"{named}: not used by diffusion_gemma canvas decoding" in out.err, out.err


def test_orl_generate_applies_the_entropy_bound(written, capsys):
    """--entropy-bound is the canvas's acceptance bound (it was ignored): the answer equals the decoder's
    with that bound, and the bound changes this answer."""
    from orl.cli import main

    model, tok, manifest = load_checkpoint(written[0])
    decoder = CanvasDecoder(model, tok, manifest=manifest)
    want = decoder.generate("hi", CanvasConfig(max_new_tokens=8, chunk_steps=1, entropy_bound=5.0))[0].text
    assert want != decoder.generate("hi", CanvasConfig(max_new_tokens=8, chunk_steps=1))[0].text
    assert main(["generate", "--model", str(written[0]), "hi", "--max-new-tokens", "8", "--entropy-bound", "5"]) == 0
    assert capsys.readouterr().out.split("\ntokens: ")[0] == "hi" + want


def test_left_padded_batch_matches_transformers(written, monkeypatch):
    """Prompts of 9 and 5 tokens in one batch (left padded, positions counting the padding): the same
    tokens as transformers' generate() with that attention_mask, and the short row as it alone."""
    d, hf = written
    g = torch.Generator().manual_seed(7)
    long, short = torch.randint(0, 256, (9,), generator=g).tolist(), torch.randint(0, 256, (5,), generator=g).tolist()
    cfg = CanvasConfig(max_new_tokens=3 * CANVAS, max_denoising_steps=4)
    batch = _ours(d, [long, short], cfg, [3, 4], EOS)
    ids = torch.tensor([long, [PAD] * 4 + short])
    mask = torch.tensor([[1] * 9, [0] * 4 + [1] * 5])
    refs = _replayed_generate(hf, monkeypatch, ids, [3, 4], cfg, EOS, attention_mask=mask).tolist()
    alone = _replayed_generate(hf, monkeypatch, torch.tensor([short]), [4], cfg, EOS)[0].tolist()
    assert [gen.token_ids for gen in batch] == [_cut(r, EOS) for r in refs]
    assert batch[1].token_ids == _cut(alone, EOS)


def test_orl_generate_reads_generation_config(written, tmp_path, capsys):
    """generation_config.json's diffusion keys and EOS ids apply, as in transformers' generate()."""
    import json
    import shutil

    from orl.cli import main

    d = tmp_path / "ckpt"
    shutil.copytree(written[0], d)
    model, tok, manifest = load_checkpoint(d)
    cfg = CanvasConfig(max_new_tokens=8, max_denoising_steps=2)
    first = CanvasDecoder(model, tok, manifest=manifest).generate("hi", cfg)[0].token_ids
    (d / "generation_config.json").write_text(json.dumps({"max_denoising_steps": 2, "eos_token_id": [first[2]]}))
    rc = main(["generate", "--model", str(d), "hi", "--max-new-tokens", "8"])
    out = capsys.readouterr().out
    assert rc == 0 and "<= 2 steps" in out and "stop: EOS" in out and f"tokens: {first.index(first[2]) + 1} " in out


def test_block_engine_refuses_it_by_name(written):
    from orl.checkpoint import CheckpointError
    from orl.engine import Engine

    with pytest.raises(CheckpointError, match="diffusion_gemma model.*CanvasDecoder"):
        Engine.from_checkpoint(written[0])
    assert CanvasDecoder.from_checkpoint(written[0]).canvas == CANVAS
