"""orl serve end to end: the real `orl serve` process on a tiny random checkpoint, driven by the official
openai client and raw HTTP. Answers must equal Engine.generate with the same settings; bad input gets
OpenAI-shaped 4xx errors; concurrent clients and dropped streams leave the server healthy.
Helpers here (tiny_checkpoint, ThreadedServer, request, post, get, counts, raw_socket) are shared with the
other test_serve_*.py files and test_web.py."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import openai
import pytest
import torch

from orl.checkpoint import save_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.model import ModelArgs, Transformer
from orl.serve import ServerConfig
from orl.serve.chat import plain_chat
from orl.serve.server import uvicorn_server
from orl.tokenizer import CharTokenizer

MODEL = "tiny"  # the served model id is the checkpoint directory's name
# the random model commits one token per step at these settings, so every block takes block_len steps
SETTINGS = dict(threshold=0.9, block_len=4)


def tiny_checkpoint(root: Path) -> Path:
    tok = CharTokenizer()
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1,
                                  head_dim=16, ffn_dim=64, max_seq_len=256))
    return save_checkpoint(model, tok, root / MODEL)


def request(url: str, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None,
            timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Raw request (any bytes) -> (status, headers with lower-case names, body bytes)."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=headers or {})
    resp = conn.getresponse()
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    return out


def post(url: str, path: str, body: bytes | dict, timeout: float = 30) -> tuple[int, dict]:
    """JSON POST (any bytes) -> (status, parsed JSON body)."""
    status, _, data = request(url, "POST", path, body, {"Content-Type": "application/json"}, timeout)
    return status, json.loads(data)


def get(url: str, path: str) -> dict:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", path)
    body = json.loads(conn.getresponse().read())
    conn.close()
    return body


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


class ThreadedServer:
    """uvicorn serving an app object on a free port in a background thread (lifespan included), with the
    connection read timeouts of `orl serve`."""

    def __init__(self, app, read_timeout_s: float = 10.0):
        self.server = uvicorn_server(app, ServerConfig(port=0, read_timeout_s=read_timeout_s), log_level="warning")
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def expected(engine: Engine, prompt: str, max_tokens: int, **kw) -> str:
    return engine.generate(prompt, DecodeConfig(max_new_tokens=max_tokens, **{**SETTINGS, **kw}))[0].text


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def engine(ckpt) -> Engine:
    return Engine.from_checkpoint(ckpt)


def start_cli_server(ckpt: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """The real CLI: `orl serve --model DIR --port N FLAGS` in a subprocess, returned once /health is ok."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "orl.cli", "serve", "--model", str(ckpt), "--port", str(port),
                             *flags, "--timeout", "60", "--device", "cpu"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"orl serve exited: {proc.stdout.read()}"
        assert time.monotonic() < deadline, "orl serve did not become healthy"
        try:
            if get(url, "/health")["status"] == "ok":
                return proc, url
        except OSError:
            time.sleep(0.2)


@contextlib.contextmanager
def serving(ckpt: Path, *flags: str):
    """`orl serve` on ckpt (start_cli_server) for the duration of a with block: its URL."""
    proc, url = start_cli_server(ckpt, *flags)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def server(ckpt):
    proc, url = start_cli_server(ckpt, "--queue-size", "32")
    yield url
    proc.terminate()
    proc.wait(timeout=20)
    assert f"model id '{MODEL}'; API {url}/v1 ; live page {url}/" in proc.stdout.read()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    h = get(server, "/health")
    assert h["status"] == "ok" and h["queue_size"] == 32


def test_completion_matches_engine(client, engine):
    r = client.completions.create(model=MODEL, prompt="hello", max_tokens=10, extra_body=SETTINGS)
    assert r.choices[0].text == expected(engine, "hello", 10)
    assert r.choices[0].finish_reason == "length"
    u = r.usage.model_dump()
    assert (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == (5, 10, 15)
    # 10 tokens = 3 blocks of 4 (the last cut at 2): one denoising step per token; the 2 commit forwards
    # are fused into the next blocks' first steps (DecodeConfig.fused_commit, the default)
    assert u["forwards"] == 10 and u["tpf"] == pytest.approx(10 / 10, abs=1e-3)


def test_chat_matches_engine_with_template(client, engine):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3="}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, seed=3,
                                       extra_body={**SETTINGS, "residual": "rcd"})
    prompt = plain_chat(messages)  # the char tokenizer has no chat template
    assert prompt == "system: be brief\n2+3="
    assert r.choices[0].message.content == expected(engine, prompt, 8, seed=3, residual="rcd")
    assert r.choices[0].message.role == "assistant"


def test_streaming_chat_one_chunk_per_block(client, engine):
    messages = [{"role": "user", "content": "stream me"}]
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=14, stream=True,
                                                 stream_options={"include_usage": True}, extra_body=SETTINGS))
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(deltas) == expected(engine, "stream me", 14)
    assert len(deltas) == 4  # ceil(14 / 4) blocks, each block one chunk
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 14


def test_streaming_completion(client, engine):
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="abc", max_tokens=7, stream=True, extra_body=SETTINGS))
    assert text == expected(engine, "abc", 7)


def test_openai_client_error_types(client):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="n=2 is not supported"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, n=2)


OK = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
BAD = [  # (path, body, status, param, words the message must contain)
    ("/v1/completions", b'{"model": "tiny", "prompt": ', 400, None, "malformed JSON"),
    ("/v1/completions", b'{"model": "tiny", "prompt": "\xff\xfe"}', 400, None, "not valid UTF-8"),
    ("/v1/completions", b"[1, 2]", 400, None, "must be a JSON object"),
    ("/v1/completions", {"model": MODEL, "max_tokens": 4}, 400, "prompt", "missing required field 'prompt'"),
    ("/v1/chat/completions", {"model": MODEL}, 400, "messages", "missing required field 'messages'"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, 400, "messages", "at least 1 item"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role", "'user'"),
    ("/v1/completions", {**OK, "prompt": 5}, 400, "prompt", "must be a string"),
    ("/v1/completions", {**OK, "prompt": ["a", "b"]}, 400, "prompt", "one prompt per request"),
    ("/v1/completions", {**OK, "max_tokens": "4"}, 400, "max_tokens", "valid integer"),
    ("/v1/completions", {**OK, "temperature": "hot"}, 400, "temperature", "valid number"),
    ("/v1/completions", {**OK, "stream": "yes"}, 400, "stream", "valid boolean"),
    ("/v1/completions", {**OK, "n": 3}, 400, "n", "not supported"),
    ("/v1/completions", {**OK, "stop": ["\n"] * 17}, 400, "stop", "at most 16 strings"),
    ("/v1/completions", {**OK, "stop": 7}, 400, "stop", "a string or a list of strings"),
    ("/v1/chat/completions", {**CHAT, "tools": []}, 400, "tools", "unsupported field 'tools'"),
    ("/v1/completions", {**OK, "max_tokens": -5}, 400, "max_tokens", "greater than or equal to 1"),
    ("/v1/completions", {**OK, "max_tokens": 10**9}, 400, "max_tokens", "exceeds the model's context of 256"),
    ("/v1/completions", {**OK, "prompt": "x" * 300}, 400, "prompt", "exceeds the model's context"),
    ("/v1/completions", {**OK, "threshold": 1.5}, 400, "threshold", "less than or equal to 1"),
    ("/v1/completions", {**OK, "threshold": 0}, 400, "threshold", "greater than 0"),
    ("/v1/completions", {**OK, "rule": "magic"}, 400, "rule", "'threshold'"),
    ("/v1/completions", {**OK, "model": "gpt-4"}, 404, "model", "model 'gpt-4' does not exist"),
    ("/v1/completions", {**OK, "prompt": "caf\u00e9"}, 400, "prompt", "'\u00e9' at position 3 is not in the tokenizer"),
    ("/v1/dlm/stream", {"prompt": "hi", "block_len": 0}, 400, "block_len", "greater than or equal to 1"),
    ("/v1/nothing", {}, 404, None, "/v1/nothing"),
]


@pytest.mark.parametrize("path,body,status,param,words", BAD, ids=[f"{b[0]}:{b[4][:30]}" for b in BAD])
def test_bad_input_gets_openai_error(server, path, body, status, param, words):
    code, out = post(server, path, body)
    assert code == status, out
    err = out["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert words in err["message"]
    assert err["param"] == param and err["type"] == "invalid_request_error"


def test_load_16_clients_x_10(server, engine):
    prompts = ["a", "bb", "hello", "2+2=", "zz top"]
    want = {p: expected(engine, p, 4) for p in prompts}

    def client_run(i: int) -> list[bool]:
        c = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)
        results = []
        for k in range(10):
            p = prompts[(i + k) % len(prompts)]
            r = c.completions.create(model=MODEL, prompt=p, max_tokens=4, extra_body=SETTINGS)
            results.append(r.choices[0].text == want[p])
        return results

    with ThreadPoolExecutor(16) as pool:
        results = [ok for rs in pool.map(client_run, range(16)) for ok in rs]
    assert len(results) == 160 and all(results)
    h = get(server, "/health")
    assert h["status"] == "ok" and h["failed"] == 0 and h["queued"] == 0


def test_dropped_stream_then_next_request_is_normal(server, client, engine):
    u = urlparse(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {**OK, "prompt": "long", "max_tokens": 200, "stream": True, **SETTINGS}), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    r = client.completions.create(model=MODEL, prompt="after", max_tokens=6, extra_body=SETTINGS)
    assert r.choices[0].text == expected(engine, "after", 6)
    assert get(server, "/health")["failed"] == 0


def test_dlm_stream_step_events(server, engine):
    """The web page's stream: one step event per denoising step with the canvas, then block/done events
    whose counts and text agree with the engine."""
    u = urlparse(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/v1/dlm/stream", body=json.dumps({"prompt": "hello", "max_tokens": 10, **SETTINGS}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type").startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    conn.close()
    steps = [e for e in events if e["type"] == "step"]
    blocks = [e for e in events if e["type"] == "block"]
    assert events[0]["type"] == "start" and events[-1]["type"] == "done"
    gen = engine.generate("hello", DecodeConfig(max_new_tokens=10, **SETTINGS))[0]
    assert events[-1]["text"] == blocks[-1]["text"] == gen.text
    assert events[-1]["block_steps"] == gen.block_steps == [4, 4, 2]
    assert len(steps) == 10 and all(sum(s["committed"]) == 1 for s in steps)
    assert steps[0]["canvas_text"] == ["<mask>"] * 4 and [s["generated"] for s in steps] == list(range(1, 11))
    assert [b["forwards"] for b in blocks] == [4, 8, 10] and events[-1]["usage"]["forwards"] == 10  # fused commits
    assert [s["forwards"] for s in steps] == list(range(1, 11))


def test_streams_send_no_empty_chunks_midway(client, engine):
    """Before: a block whose text a stop string's prefix held back (or a block of only EOS) went out as an empty
    chunk; the text is the same, the stream now carries text in every chunk but the last."""
    want = expected(engine, "abc", 12)
    stop = want[:4] + "\x7f"  # the whole first block is a prefix of the stop string: held back, never matched
    chunks = list(client.completions.create(model=MODEL, prompt="abc", max_tokens=12, stream=True, stop=stop,
                                            extra_body=SETTINGS))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == want and all(texts[:-1]), texts
