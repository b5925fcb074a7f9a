"""orl serve against hostile or unusual clients (issue 16, items 9-18), over real HTTP: no request can
produce a 500 (and one that still does closes its connection cleanly), parameters are validated before
queueing, /health counts right, half-sent requests time out, bad flags are one-line errors, sampling
draws a fresh seed, and chat renders every message."""
from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from urllib.parse import urlparse

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.cli import main
from orl.engine import DecodeConfig, Engine
from orl.model import ModelArgs, Transformer
from orl.serve import ServerConfig, create_app
from orl.serve.chat import plain_chat
from orl.serve.worker import Job
from test_serve import SETTINGS, ThreadedServer, get, post, tiny_checkpoint

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


def raw_socket(url: str) -> socket.socket:
    u = urlparse(url)
    return socket.create_connection((u.hostname, u.port), timeout=10)


def counts(url: str) -> tuple[int, int, int]:
    """/health's (completed, cancelled, failed) once the worker is idle (it counts after the answer is out)."""
    deadline = time.monotonic() + 20
    while (h := get(url, "/health"))["busy"] or h["queued"]:
        assert time.monotonic() < deadline, h
        time.sleep(0.02)
    return h["completed"], h["cancelled"], h["failed"]


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
    ("/v1/completions", {**BODY, "block_len": 10**30}, "context_length_exceeded", "max_tokens"),
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


# ---------------------------------------------------------------- 14: half-sent requests


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_client_leaving_mid_body_logs_nothing(server):
    records = Records()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(records)
    try:
        before = counts(server)
        s = raw_socket(server)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"model\": ")
        time.sleep(0.2)
        s.close()
        time.sleep(0.3)
        assert get(server, "/health")["status"] == "ok" and counts(server) == before
    finally:
        logger.removeHandler(records)
    assert [r.getMessage() for r in records.records] == []


def closed_within(s: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """(closed by the server within `seconds`, what it sent first)."""
    s.settimeout(seconds)
    got = b""
    try:
        while chunk := s.recv(4096):
            got += chunk
    except (TimeoutError, socket.timeout):
        return False, got
    except ConnectionResetError:
        pass
    return True, got


def test_partial_header_is_closed_after_the_read_timeout(server):
    s = raw_socket(server)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    t0 = time.monotonic()
    closed, _ = closed_within(s, READ_TIMEOUT + 4)
    s.close()
    assert closed and time.monotonic() - t0 >= READ_TIMEOUT * 0.8


def test_trickled_header_after_a_response_is_closed(server):
    """uvicorn's keep-alive timer restarts on every byte: a header sent one byte at a time must not hold
    the connection past the read timeout."""
    s = raw_socket(server)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    s.settimeout(0.3)
    t0 = time.monotonic()
    closed = False
    for byte in b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 40:
        try:
            s.sendall(bytes([byte]))
            if s.recv(4096) == b"":
                closed = True
                break
        except (TimeoutError, socket.timeout):
            continue
        except OSError:
            closed = True
            break
    s.close()
    assert closed and time.monotonic() - t0 < READ_TIMEOUT + 4


def test_partial_body_gets_408_and_close(server):
    before = counts(server)
    s = raw_socket(server)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{\"model\": ")
    closed, got = closed_within(s, READ_TIMEOUT + 4)
    s.close()
    assert closed and got.startswith(b"HTTP/1.1 408"), got
    assert b"connection: close" in got.lower() and b"request_timeout" in got
    assert counts(server) == before


# ---------------------------------------------------------------- 16: bad flags


@pytest.mark.parametrize("flags,words", [
    (["--timeout", "-1"], "timeout must be a positive number of seconds, got -1.0"),
    (["--timeout", "nan"], "timeout must be a positive number"),
    (["--read-timeout", "0"], "read timeout must be a positive number"),
    (["--port", "70000"], "port must be in 0..65535, got 70000"),
    (["--queue-size", "0"], "queue size must be >= 1"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--cors-origins", "evil.com"], "CORS origin 'evil.com' is not of the form"),
])
def test_bad_serve_flags_are_one_line_errors(ckpt, capsys, flags, words):
    t0 = time.monotonic()
    assert main(["serve", "--model", str(ckpt), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert time.monotonic() - t0 < 5  # refused before the model is loaded


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_one_line_error(ckpt, capsys):
    assert main(["serve", "--model", str(ckpt), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and len(err.strip().splitlines()) == 1


def test_port_in_use_is_a_one_line_error(ckpt, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(ckpt), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1, err


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
