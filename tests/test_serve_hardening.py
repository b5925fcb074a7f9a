"""orl serve against hostile or unusual requests (issue 16, items 9-13, 17, 18; connection-level items
in test_serve_connections.py), over real HTTP: no request can produce a 500 (and one that still does
closes its connection cleanly), parameters are validated before queueing, /health counts right,
sampling draws a fresh seed, and chat renders every message."""
from __future__ import annotations

import http.client
import json
import logging
import time
from urllib.parse import urlparse

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.model import ModelArgs, Transformer
from orl.serve import ServerConfig, create_app
from orl.serve.chat import plain_chat
from orl.serve.worker import Job
from orl.tokenizer import CharTokenizer
from test_serve import SETTINGS, ThreadedServer, counts, post, request, tiny_checkpoint

MODEL = "tiny"
READ_TIMEOUT = 1.0
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 4, **SETTINGS}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **SETTINGS}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("hardening"))


@pytest.fixture(scope="module")
def engine(ckpt) -> Engine:
    model, tok, _ = load_checkpoint(ckpt)
    return Engine(model, tok)


@pytest.fixture(scope="module")
def server(engine):
    app = create_app(engine, MODEL, config=ServerConfig(read_timeout_s=READ_TIMEOUT))
    with ThreadedServer(app, read_timeout_s=READ_TIMEOUT) as url:
        yield url


def connect(url: str) -> http.client.HTTPConnection:
    u = urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)


# ---------------------------------------------------------------- 9: max_completion_tokens


def test_chat_max_completion_tokens(server, engine):
    status, body = post(server, "/v1/chat/completions", {**CHAT, "max_completion_tokens": 8})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 8
    want = engine.generate("hi", DecodeConfig(max_new_tokens=8, **SETTINGS))[0].text
    assert body["choices"][0]["message"]["content"] == want
    status, body = post(server, "/v1/chat/completions", {**CHAT, "max_completion_tokens": 8, "max_tokens": 4})
    assert status == 400 and body["error"]["param"] == "max_completion_tokens"


# ---------------------------------------------------------------- 10: a 500 closes its connection cleanly


class BrokenEngine(Engine):
    """A bug in the server's own code path (not the request's fault): encode raises a RuntimeError."""

    def encode(self, prompt: str) -> list[int]:
        raise RuntimeError("simulated bug")


def test_500_says_connection_close_and_the_next_request_works(engine):
    broken = BrokenEngine(engine.model, engine.tokenizer)
    quiet = logging.getLogger("uvicorn.error")
    level, quiet.disabled = quiet.level, True  # the traceback uvicorn logs for a real 500 is expected here
    try:
        with ThreadedServer(create_app(broken, MODEL)) as url:
            conn = connect(url)
            conn.request("POST", "/v1/completions", body=json.dumps(BODY), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            assert resp.status == 500 and body["error"]["type"] == "server_error"
            assert resp.getheader("connection") == "close"
            conn.request("GET", "/health")  # same client object: it must know to open a new connection
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        quiet.disabled = False
        quiet.setLevel(level)


NASTY = [  # bodies that once produced a 500, or could: each must be a 4xx naming the problem
    ("/v1/completions", b"[" * 100_000, "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}", "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "seed": ' + b"1" * 4301 + b"}", "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "temperature": NaN}', "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "factor": 1e999}', "finite_number", "factor"),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "\\ud800": 1}', "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "stream_options": {"\\ud800": 1}}', "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "h\\udfffi", "max_tokens": 4}', "invalid_json", None),
    ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "stop": ' + b"[" * 40 + b"]" * 40 + b"}", "invalid_json", None),
    ("/v1/completions", {**BODY, "seed": 2**64}, "less_than_equal", "seed"),
    ("/v1/completions", {**BODY, "seed": -(2**63) - 1}, "greater_than_equal", "seed"),
    ("/v1/completions", {**BODY, "residual": "adapter"}, "unsupported_value", "residual"),
    ("/v1/completions", {**BODY, "block_len": 10**30}, "less_than_equal", "block_len"),
    ("/v1/completions", {**BODY, "max_tokens": 10**30}, "less_than_equal", "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 10**30}, "less_than_equal", "max_completion_tokens"),
    ("/v1/completions", {**BODY, "block_len": 4, "rule": "fast_dllm_v2", "small_block_size": 2},  # unshifted model
     "unsupported_value", "rule"),
    ("/v1/completions", {**BODY, "rule": "topk", "steps_per_block": 10**30}, "less_than_equal", "steps_per_block"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "value_error", "messages.0.content"),
    ("/v1/dlm/stream", {"prompt": "hi", "seed": 2**70}, "less_than_equal", "seed"),
]


@pytest.mark.parametrize("path,body,code,param", NASTY, ids=[f"{i}" for i in range(len(NASTY))])
def test_no_request_produces_a_500(server, path, body, code, param):
    before = counts(server)
    status, out = post(server, path, body)
    if code is None:  # a valid, if odd, request
        assert status == 200, out
        return
    assert status == 400, out
    err = out["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == code and err["param"] == param, err
    assert counts(server) == before  # refused before queueing: the engine never saw it


def test_seed_uses_all_64_bits(server):
    def sample(seed: int) -> str:
        status, body = post(server, "/v1/completions", {**BODY, "max_tokens": 24, "temperature": 1.0, "seed": seed})
        assert status == 200 and body["seed"] == seed, body
        return body["choices"][0]["text"]

    assert sample(2) == sample(2)
    assert sample(2) != sample(2**31 + 2)
    assert sample(-1) != sample(2**31 - 1)


# ---------------------------------------------------------------- 13: /health counts


def test_health_counts_successes_as_completed(server, monkeypatch):
    """The request cancels its job once it holds the last event; the worker must still count a success.
    Emitting slowly lets the request get there first every time (it used to, now and then)."""
    emit = Job.emit

    def slow_emit(self, event):
        emit(self, event)
        time.sleep(0.05)

    monkeypatch.setattr(Job, "emit", slow_emit)
    completed, cancelled, failed = counts(server)
    for stream in (False, True, False):
        assert (streamed_status(server) if stream else post(server, "/v1/completions", BODY)[0]) == 200
    assert counts(server) == (completed + 3, cancelled, failed)


def streamed_status(url: str) -> int:
    conn = connect(url)
    conn.request("POST", "/v1/completions", body=json.dumps({**BODY, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    assert text.rstrip().endswith("data: [DONE]")
    return resp.status


# ---------------------------------------------------------------- 17: fresh seeds


def test_sampling_without_seed_draws_a_fresh_one(server):
    sampled = {**BODY, "max_tokens": 24, "temperature": 1.0}
    answers = [post(server, "/v1/completions", sampled)[1] for _ in range(3)]
    seeds = [a["seed"] for a in answers]
    assert all(isinstance(s, int) for s in seeds) and len(set(seeds)) == 3
    assert len({a["choices"][0]["text"] for a in answers}) > 1
    again = post(server, "/v1/completions", {**sampled, "seed": seeds[0]})[1]  # the seed reproduces the sample
    assert again["choices"][0]["text"] == answers[0]["choices"][0]["text"]
    assert post(server, "/v1/completions", BODY)[1]["seed"] is None  # greedy: no seed involved


def test_streamed_sample_carries_its_seed(server):
    conn = connect(server)
    conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                 body=json.dumps({**CHAT, "max_tokens": 8, "temperature": 1.0, "stream": True}))
    lines = [line for line in conn.getresponse().read().decode().splitlines() if line.startswith("data: {")]
    conn.close()
    seeds = {json.loads(line[6:])["seed"] for line in lines}
    assert len(seeds) == 1 and isinstance(seeds.pop(), int)


# ---------------------------------------------------------------- 18: every chat message is rendered


def test_chat_without_template_renders_every_role(server, engine):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3="},
                {"role": "assistant", "content": "5"}, {"role": "developer", "content": "again"},
                {"role": "user", "content": "4+4="}]
    prompt = plain_chat([{**m, "role": "system" if m["role"] == "developer" else m["role"]} for m in messages])
    assert prompt == "system: be brief\n2+3=\nassistant: 5\nsystem: again\n4+4="
    status, body = post(server, "/v1/chat/completions", {**CHAT, "messages": messages, "max_tokens": 8})
    assert status == 200 and body["usage"]["prompt_tokens"] == len(prompt)
    want = engine.generate(prompt, DecodeConfig(max_new_tokens=8, **SETTINGS))[0].text
    assert body["choices"][0]["message"]["content"] == want


def test_chat_with_the_checkpoints_template(tmp_path):
    from test_tokenizer import write_hf_tokenizer

    from orl.tokenizer import load_tokenizer

    write_hf_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                  head_dim=16, ffn_dim=64, max_seq_len=128))
    engine = Engine(model, tok)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "world"}, {"role": "user", "content": "hello"}]
    with ThreadedServer(create_app(engine, "hf")) as url:
        status, body = post(url, "/v1/chat/completions", {"model": "hf", "messages": messages, "max_tokens": 8, **SETTINGS})
    prompt = tok.apply_chat_template(messages)
    assert prompt.count("<|im_start|>") == 5 and "be brief" in prompt and "world" in prompt
    assert status == 200 and body["usage"]["prompt_tokens"] == len(tok.encode(prompt))
    want = engine.generate(prompt, DecodeConfig(max_new_tokens=8, **SETTINGS))[0].text
    assert body["choices"][0]["message"]["content"] == want


def test_a_model_with_a_residual_adapter_is_served_in_its_own_mode():
    """Before: the server looked for the adapter on the outer Transformer (it lives in .model), so a shipped ORL
    checkpoint (residual_mode adapter) answered every plain request with a 400 and its page offered only 'off'."""
    torch.manual_seed(0)
    tok = CharTokenizer()
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=128, adapter_dim=8)).eval()
    defaults = DecodeConfig(block_len=4, max_new_tokens=8, threshold=0.9, residual="adapter")
    with ThreadedServer(create_app(Engine(model, tok), "orl", defaults=defaults)) as url:
        info = json.loads(request(url, "GET", "/v1/dlm/info")[2])
        assert "adapter" in info["residual_modes"] and info["defaults"]["residual"] == "adapter"
        status, body = post(url, "/v1/completions", {"model": "orl", "prompt": "sort:b2,a1=", "max_tokens": 8})
        assert status == 200, body
        want = Engine(model, tok).generate("sort:b2,a1=", defaults)[0].text
        assert body["choices"][0]["text"] == want


def grid_app(max_seq_len: int = 32):
    torch.manual_seed(0)
    tok = CharTokenizer()
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=max_seq_len)).eval()
    engine = Engine(model, tok)
    return engine, create_app(engine, "grid", defaults=DecodeConfig(block_len=8, max_new_tokens=16, threshold=0.9,
                                                                    layout="absolute_grid"))


def test_the_context_check_counts_as_the_engine_on_the_absolute_grid():
    """Before: the server counted prompt + whole blocks of max_tokens; the engine starts the blocks at the prompt's
    last whole-block boundary. A 21-token prompt + 3 tokens (one block from slot 16: 24 <= 32) was refused; a
    27-token prompt with block_len 3 and 5 tokens (the engine: 27 + 2 blocks of 3 from slot 27 = 33 > 32) was
    queued, then refused by the engine as a failed job."""
    engine, app = grid_app()
    with ThreadedServer(app) as url:
        before = counts(url)
        status, body = post(url, "/v1/completions", {"model": "grid", "prompt": "a" * 21, "max_tokens": 3})
        assert status == 200, body
        want = engine.generate("a" * 21, DecodeConfig(block_len=8, max_new_tokens=3, threshold=0.9,
                                                       layout="absolute_grid"))[0].text
        assert body["choices"][0]["text"] == want
        status, body = post(url, "/v1/completions", {"model": "grid", "prompt": "a" * 27, "max_tokens": 5,
                                                     "block_len": 3})
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
        assert body["error"]["param"] == "max_tokens" and "at most 3 tokens fit" in body["error"]["message"]
        status, body = post(url, "/v1/completions", {"model": "grid", "prompt": "a" * 32, "max_tokens": 1})
        assert status == 400 and body["error"]["param"] == "prompt", body  # no answer fits: the prompt is the problem
        health = json.loads(request(url, "GET", "/health")[2])
        assert counts(url) == (before[0] + 1, *before[1:]) and health["rejected"] == 0  # only the first one ran


def test_a_request_without_max_tokens_gets_what_fits():
    """Before: the default 64 made every prompt over context - 64 a 400 naming a max_tokens never sent."""
    _, app = grid_app()
    with ThreadedServer(app) as url:
        status, body = post(url, "/v1/completions", {"model": "grid", "prompt": "a" * 20})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] <= 12  # slots 16..31: the prompt's last 4, then 12 answer slots
        status, body = post(url, "/v1/completions", {"model": "grid", "prompt": "a" * 20, "max_tokens": 16})
        assert status == 400 and "at most 12 tokens fit" in body["error"]["message"], body


def test_health_is_current_as_soon_as_the_answer_arrives():
    """Before: the worker counted a job and cleared `busy` only after the client had its last event, so a /health
    polled right after an answer could still say busy (and miss the count)."""
    _, app = grid_app()
    with ThreadedServer(app) as url:
        for i in range(5):
            status, _ = post(url, "/v1/completions", {"model": "grid", "prompt": "ab", "max_tokens": 4})
            health = json.loads(request(url, "GET", "/health")[2])  # no wait: counts() would poll until idle
            assert status == 200 and not health["busy"] and health["completed"] == i + 1, health


def test_an_explicit_max_completion_tokens_that_does_not_fit_is_refused():
    """Before: max_completion_tokens was folded into max_tokens only inside the config, so the cap for an omitted
    max_tokens also cut an explicit max_completion_tokens short instead of refusing it."""
    _, app = grid_app()
    chat = {"model": "grid", "messages": [{"role": "user", "content": "a" * 12}]}
    with ThreadedServer(app) as url:
        for name in ("max_tokens", "max_completion_tokens"):
            status, body = post(url, "/v1/chat/completions", {**chat, name: 100})
            assert status == 400 and body["error"]["code"] == "context_length_exceeded", (name, body)
