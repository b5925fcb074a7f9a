"""`orl serve` on a DiffusionGemma checkpoint (the tiny save_pretrained fixture): the real process,
driven by the openai client and raw HTTP. Completions and chat decode through CanvasDecoder (answers
and usage equal a direct CanvasDecoder call with the reported seed), streaming sends one chunk per
canvas, and every knob canvas decoding has no use for is a named 400 before queueing."""
from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from diffusion_gemma_fixture import CANVAS, write_diffusion_gemma
from test_serve import counts, get, post, serving

pytestmark = pytest.mark.usefixtures("one_thread")
pytest.importorskip("transformers")
MODEL = "dgemma"
FAST = {"steps_per_block": 3}  # denoising steps per canvas (the checkpoint's default is 48)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_canvas") / MODEL
    write_diffusion_gemma(d)
    return d


@pytest.fixture(scope="module")
def decoder(ckpt):
    from orl.checkpoint import load_checkpoint
    from orl.engine.canvas_defaults import canvas_decoder

    return canvas_decoder(ckpt, *load_checkpoint(ckpt))


@pytest.fixture(scope="module")
def server(ckpt):
    with serving(ckpt) as url:
        yield url


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def direct(decoder, prompt: str, max_tokens: int, seed: int, steps: int = 3):
    import dataclasses

    dec, defaults = decoder
    return dec.generate(prompt, dataclasses.replace(defaults, max_new_tokens=max_tokens, seed=seed,
                                                    max_denoising_steps=steps))[0]


def test_completion_is_the_canvas_decoder_s(client, decoder):
    r = client.completions.create(model=MODEL, prompt="hello", max_tokens=7, seed=5, extra_body=FAST)
    g = direct(decoder, "hello", 7, 5)
    assert r.choices[0].text == g.text and r.model_extra["seed"] == 5
    assert r.choices[0].finish_reason == ("stop" if g.finished else "length")
    u = r.usage.model_dump()
    assert (u["prompt_tokens"], u["completion_tokens"]) == (len(g.prompt_ids), g.n_tokens)
    assert u["forwards"] == g.step_forwards + g.commit_forwards and u["tpf"] == pytest.approx(g.tpf, abs=1e-4)
    other = client.completions.create(model=MODEL, prompt="hello", max_tokens=7, seed=6, extra_body=FAST)
    assert other.choices[0].text == direct(decoder, "hello", 7, 6).text


def test_fresh_seed_is_reported_and_reproduces(client, decoder):
    r = client.completions.create(model=MODEL, prompt="abc", max_tokens=5, extra_body=FAST)
    seed = r.model_extra["seed"]
    assert isinstance(seed, int) and r.choices[0].text == direct(decoder, "abc", 5, seed).text


def test_chat_and_max_completion_tokens(client, decoder):
    from orl.serve.chat import render_chat
    from orl.serve.protocol import Message

    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=6, seed=3,
                                       extra_body=FAST)
    prompt = render_chat(decoder[0].tokenizer, [Message(**m) for m in messages])
    assert r.choices[0].message.content == direct(decoder, prompt, 6, 3).text


def test_streaming_one_chunk_per_canvas(client, decoder):
    chunks = list(client.completions.create(model=MODEL, prompt="stream", max_tokens=3 * CANVAS, seed=9,
                                            stream=True, stream_options={"include_usage": True}, extra_body=FAST))
    g = direct(decoder, "stream", 3 * CANVAS, 9)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == g.text
    assert chunks[-1].usage.completion_tokens == g.n_tokens and chunks[-1].usage.forwards == g.forwards
    # one chunk per decoded canvas, then the one with finish_reason, then usage
    assert len(chunks) == len(g.block_steps) + 2
    from orl.serve.chat import render_chat
    from orl.serve.protocol import Message

    messages = [{"role": "user", "content": "chat stream"}]
    deltas = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=2 * CANVAS, seed=2, stream=True, extra_body=FAST) if c.choices]
    prompt = render_chat(decoder[0].tokenizer, [Message(**m) for m in messages])
    assert "".join(deltas) == direct(decoder, prompt, 2 * CANVAS, 2).text


@pytest.mark.parametrize("field, value", [("temperature", 0.5), ("threshold", 0.5), ("rule", "dream"),
                                          ("block_len", 8), ("residual", "rcd"), ("top_p", 0.9), ("top_k", 3),
                                          ("factor", 1.0), ("alg_temp", 0.1), ("small_block_size", 2)])
def test_knobs_without_a_use_are_named_400s_before_queueing(server, field, value):
    before = counts(server)
    code, out = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4, field: value})
    assert code == 400, out
    err = out["error"]
    assert err["param"] == field and err["code"] == "unsupported_value" and "canvas decoding" in err["message"]
    assert counts(server) == before


def test_other_refusals_before_queueing(server):
    before = counts(server)
    code, out = post(server, "/v1/dlm/stream", {"prompt": "hi", "max_tokens": 4})
    assert code == 400 and out["error"]["code"] == "unsupported_value" and "step" in out["error"]["message"], out
    code, out = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4,
                                                 "steps_per_block": 5000})
    assert code == 400 and out["error"]["param"] == "steps_per_block", out
    code, out = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4, "entropy_bound": 0})
    assert code == 400 and out["error"]["param"] == "entropy_bound", out
    code, out = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1000})
    assert code == 400 and out["error"]["code"] == "context_length_exceeded", out
    assert "canvas(es) of 4" in out["error"]["message"]
    assert counts(server) == before


def test_info_health_and_concurrent_clients(server, client, decoder):
    info = get(server, "/v1/dlm/info")
    assert info["rules"] == ["canvas"] and info["defaults"]["max_denoising_steps"] == 48
    before = counts(server)

    def one(i: int) -> bool:
        r = client.completions.create(model=MODEL, prompt=f"p{i}", max_tokens=5, seed=i, extra_body=FAST)
        return r.choices[0].text == direct(decoder, f"p{i}", 5, i).text

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(6)))
    assert counts(server) == (before[0] + 6, before[1], before[2])


def test_dropped_stream_stops_the_decode(server):
    """The worker checks the job between canvases: a client gone after the first chunk cancels the decode
    (25 canvases of up to 48 denoising steps would run for seconds), and the server serves on."""
    import http.client
    import json

    before = counts(server)
    conn = http.client.HTTPConnection("127.0.0.1", int(server.rsplit(":", 1)[1]), timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 25 * CANVAS,
                                                            "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert counts(server) == (before[0], before[1] + 1, before[2])
    code, out = post(server, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4, **FAST})
    assert code == 200 and out["usage"]["completion_tokens"] >= 1
