"""`orl serve` with the autoregressive decoder: the shipped AR peer (plain AR decoding), and the shipped
block-diffusion base decoding self-speculatively (`--spec-tokens 4 --spec-draft fused`: its AR path's
tokens). The real process, driven by the openai client and raw HTTP: answers, usage and streams equal a
direct ARDecoder call, the block decoder's knobs are named 400s before queueing, and the command line
refuses a speculative setting the checkpoint cannot run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openai
import pytest

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from test_serve import counts, get, post, serving

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1] / "checkpoints"
AR, BASE = ROOT / "orl-tiny-ar", ROOT / "orl-tiny-base"
FUSED = ("--spec-tokens", "4", "--spec-draft", "fused")
PROMPTS = ["cumsum:877347649366134=", "sort:j5,e4,a3,b4,d3,h2,i3="]


def decoder(ckpt: Path) -> ARDecoder:
    model, tok, manifest = load_checkpoint(ckpt)
    return ARDecoder(model, tok, manifest=manifest)


@pytest.fixture(scope="module")
def ar_server():
    with serving(AR) as url:
        yield url


@pytest.fixture(scope="module")
def fused_server():
    with serving(BASE, *FUSED) as url:
        yield url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_ar_checkpoint_answers_as_the_ar_decoder(ar_server):
    dec = decoder(AR)
    for p in PROMPTS:
        r = client(ar_server).completions.create(model=AR.name, prompt=p, max_tokens=24)
        want = dec.generate([p], ARConfig(max_new_tokens=24))[0]
        assert r.choices[0].text == want.text
        assert r.choices[0].finish_reason == ("stop" if want.finished else "length")
        u = r.usage
        assert (u.completion_tokens, u.model_extra["forwards"]) == (want.n_tokens, want.forwards)
        assert u.model_extra["tpf"] == pytest.approx(1.0)  # one token per forward, by definition
    info = get(ar_server, "/v1/dlm/info")
    assert info["decoder"] == "autoregressive" and info["rules"] == [] and info["defaults"]["spec_tokens"] == 0


def test_fused_self_speculative_server_emits_the_ar_paths_tokens(fused_server):
    """The base's AR path decodes; the fused drafts only change the forwards (TPF > 1 on these prompts)."""
    dec = decoder(BASE)
    tpf = []
    for p in PROMPTS:
        r = client(fused_server).completions.create(model=BASE.name, prompt=p, max_tokens=40)
        plain = dec.generate([p], ARConfig(max_new_tokens=40))[0]
        fused = dec.generate([p], ARConfig(max_new_tokens=40, spec_tokens=4, spec_draft="fused"))[0]
        assert r.choices[0].text == plain.text == fused.text
        assert r.usage.model_extra["forwards"] == fused.forwards
        tpf.append(r.usage.model_extra["tpf"])
    assert max(tpf) > 1.5, tpf
    info = get(fused_server, "/v1/dlm/info")
    assert (info["defaults"]["spec_tokens"], info["defaults"]["spec_draft"]) == (4, "fused")


def test_streams_deliver_the_answer_in_several_chunks(fused_server):
    prompt = PROMPTS[0]
    want = decoder(BASE).generate([prompt], ARConfig(max_new_tokens=40))[0].text
    chunks = [c.choices[0].text for c in client(fused_server).completions.create(
        model=BASE.name, prompt=prompt, max_tokens=40, stream=True)]
    assert "".join(chunks) == want and sum(bool(c) for c in chunks) >= 3, chunks
    chat = client(fused_server).chat.completions.create(
        model=BASE.name, messages=[{"role": "user", "content": prompt}], max_completion_tokens=12, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chat if c.choices)


def test_sampling_reports_a_seed_that_reproduces(ar_server):
    c = client(ar_server)
    r = c.completions.create(model=AR.name, prompt=PROMPTS[1], max_tokens=16, temperature=1.0)
    seed = r.model_extra["seed"]
    assert isinstance(seed, int)
    want = decoder(AR).generate([PROMPTS[1]], ARConfig(max_new_tokens=16, temperature=1.0, seed=seed))[0]
    assert r.choices[0].text == want.text
    again = c.completions.create(model=AR.name, prompt=PROMPTS[1], max_tokens=16, temperature=1.0, seed=seed)
    assert again.choices[0].text == want.text
    assert c.completions.create(model=AR.name, prompt="x", max_tokens=4).model_extra["seed"] is None  # greedy


@pytest.mark.parametrize("which", ["ar", "fused"])
def test_stop_strings_streamed_and_not(ar_server, fused_server, which):
    """A stop string ends the answer before it, and a stream never sends a tail that becomes one (the text of
    every chunk is a prefix of the final answer, Stops.visible), whatever the chunk boundaries."""
    url, ckpt = (ar_server, AR) if which == "ar" else (fused_server, BASE)
    full = decoder(ckpt).generate([PROMPTS[0]], ARConfig(max_new_tokens=40))[0].text
    c = client(url)
    for stop in (full[13:18], full[20:22], full[5:6]):
        want = full[: full.index(stop)]
        r = c.completions.create(model=ckpt.name, prompt=PROMPTS[0], max_tokens=40, stop=[stop], top_p=1.0)
        assert r.choices[0].text == want and r.choices[0].finish_reason == "stop", stop
        chunks = [ch.choices[0].text for ch in c.completions.create(model=ckpt.name, prompt=PROMPTS[0],
                                                                    max_tokens=40, stop=[stop], stream=True)]
        assert "".join(chunks) == want, (stop, chunks)


@pytest.mark.parametrize("field, value", [("temperature", 1e-300), ("threshold", 0.5), ("rule", "dream"), ("block_len", 8),
                                          ("residual", "rcd"), ("top_p", 0.9), ("top_k", 3),
                                          ("steps_per_block", 2), ("entropy_bound", 0.5)])
def test_block_decoder_knobs_are_named_400s_before_queueing(ar_server, field, value):
    before = counts(ar_server)
    code, out = post(ar_server, "/v1/completions", {"model": AR.name, "prompt": "hi", "max_tokens": 4, field: value})
    assert code == 400, out
    err = out["error"]
    if field == "temperature":  # 0 in float32: logits / T would be garbage, not greedy
        assert "temperature must be 0 (greedy) or >= 1e-06" in err["message"], err
    else:
        assert err["param"] == field and err["code"] == "unsupported_value" and "autoregressive" in err["message"]
    assert counts(ar_server) == before


def test_other_refusals_before_queueing(ar_server):
    before = counts(ar_server)
    code, out = post(ar_server, "/v1/dlm/stream", {"prompt": "hi", "max_tokens": 4})
    assert code == 400 and "denoising steps" in out["error"]["message"], out
    code, out = post(ar_server, "/v1/completions", {"model": AR.name, "prompt": "hi", "max_tokens": 200})
    assert code == 400 and out["error"]["code"] == "context_length_exceeded", out
    assert "prompt (2 tokens) + max_tokens 200 = 202 tokens" in out["error"]["message"]
    assert counts(ar_server) == before


@pytest.mark.parametrize("ckpt, flags, words", [
    (AR, FUSED, "block-diffusion checkpoint"),                           # no diffusion path to draft with
    (BASE, ("--spec-tokens", "4"), "--spec-draft diffusion | fused"),    # prompt lookup: AR checkpoints only
    (BASE, ("--spec-draft", "fused"), "set spec_tokens > 0"),            # a drafter without a draft length
    (AR, ("--spec-ngram", "3"), "set spec_tokens > 0"),                  # a lookup knob without the lookup
    (BASE, ("--spec-tokens", "4", "--spec-groups", "2"), "spec_groups"),  # groups are the fused drafter's
])
def test_cli_refuses_what_the_checkpoint_cannot_run(ckpt, flags, words):
    out = subprocess.run([sys.executable, "-m", "orl.cli", "serve", "--model", str(ckpt), "--port", "0", *flags,
                          "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and words in out.stderr, out.stderr
