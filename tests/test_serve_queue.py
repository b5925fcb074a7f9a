"""The queueing model of orl serve, made deterministic with an engine whose events wait on a gate:
one request at a time, a full queue answers 503, the per-request timeout answers 504 (queue wait
included), a dropped stream stops its generation and frees the engine, oversized bodies get 413."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from urllib.parse import urlparse

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.serve import ServerConfig, create_app
from test_serve import SETTINGS, ThreadedServer, get, post, request, tiny_checkpoint

MODEL = "tiny"


class GatedEngine(Engine):
    """Each engine event waits for `gate`, then `delay` seconds; `events` counts what was produced."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.gate = threading.Event()
        self.gate.set()
        self.delay = 0.0
        self.events = 0

    def run(self, *args, **kw):
        for event in super().run(*args, **kw):
            assert self.gate.wait(timeout=30)
            time.sleep(self.delay)
            self.events += 1
            yield event


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model on a shared 2-core machine: threads cost more than they give
    model, tok, _ = load_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("queue")))
    yield GatedEngine(model, tok)
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def server(engine):
    app = create_app(engine, MODEL, config=ServerConfig(queue_size=1, timeout_s=1.0, max_body_bytes=4096))
    with ThreadedServer(app) as url:
        yield url


@pytest.fixture(scope="module")
def patient_server(engine):
    """No timeout in sight: whatever cancels a job here is the client hanging up. (Shares the engine
    with `server`; the tests use one at a time.)"""
    with ThreadedServer(create_app(engine, MODEL, config=ServerConfig(timeout_s=60.0))) as url:
        yield url


def wait_health(url: str, **want) -> dict:
    deadline = time.monotonic() + 20
    while True:
        h = get(url, "/health")
        if all(h[k] == v for k, v in want.items()):
            return h
        assert time.monotonic() < deadline, f"health never reached {want}: {h}"
        time.sleep(0.02)


def in_thread(fn, *args) -> tuple[threading.Thread, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn(*args)))
    t.start()
    return t, out


BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 4, **SETTINGS}


def test_queue_full_503_and_timeout_504(server, engine):
    engine.gate.clear()  # the first request holds the engine until the gate opens
    a, a_out = in_thread(post, server, "/v1/completions", BODY)
    wait_health(server, busy=True)
    b, b_out = in_thread(post, server, "/v1/completions", BODY)
    wait_health(server, queued=1)
    status, headers, data = request(server, "POST", "/v1/completions", BODY, {"Content-Type": "application/json"})
    body = json.loads(data)
    assert status == 503 and body["error"]["code"] == "queue_full" and "queue is full" in body["error"]["message"]
    assert int(headers["retry-after"]) >= 1
    a.join(10)
    b.join(10)
    for status, body in (a_out[0], b_out[0]):  # running and waiting request both past their 1 s deadline
        assert status == 504 and body["error"]["code"] == "timeout", body
    engine.gate.set()
    h = wait_health(server, busy=False, queued=0)
    assert h["cancelled"] >= 2
    status, body = post(server, "/v1/completions", BODY)
    want = engine.generate("hi", DecodeConfig(max_new_tokens=4, **SETTINGS))[0].text
    assert status == 200 and body["choices"][0]["text"] == want


def test_dropped_stream_stops_generation(server, engine):
    engine.delay = 0.03
    before = get(server, "/health")["cancelled"]
    n_blocks = 20
    u = urlparse(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("POST", "/v1/completions", body=json.dumps({**BODY, "max_tokens": 4 * n_blocks, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    engine.events = 0
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    h = wait_health(server, busy=False)
    engine.delay = 0.0
    assert h["cancelled"] == before + 1
    assert engine.events < n_blocks // 2, "the generation ran on after the client left"
    status, body = post(server, "/v1/completions", BODY)
    assert status == 200 and body["usage"]["completion_tokens"] == 4


def test_body_too_large_413(server):
    status, body = post(server, "/v1/completions", {**BODY, "prompt": "x" * 5000})
    assert status == 413 and "exceeds the limit of 4096" in body["error"]["message"]


def send_and_hang_up_later(url: str, body: dict) -> socket.socket:
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return s


def test_hung_up_non_streaming_request_stops_generation(patient_server, engine):
    """Like a dropped stream: a plain request whose client left is cancelled, not run on for nobody."""
    url, n_blocks = patient_server, 20
    engine.delay = 0.03
    before = get(url, "/health")["cancelled"]
    try:
        s = send_and_hang_up_later(url, {**BODY, "max_tokens": 4 * n_blocks})
        wait_health(url, busy=True)
        engine.events = 0
        s.close()
        h = wait_health(url, busy=False)
    finally:
        engine.delay = 0.0
    assert h["cancelled"] == before + 1
    assert engine.events < n_blocks // 2, "the generation ran on after the client left"


def test_hung_up_request_leaves_the_queue(patient_server, engine):
    url = patient_server
    engine.gate.clear()  # the first request holds the engine
    try:
        first = send_and_hang_up_later(url, BODY)
        wait_health(url, busy=True)
        second = send_and_hang_up_later(url, BODY)
        wait_health(url, queued=1)
        before = get(url, "/health")["cancelled"]
        second.close()
        h = wait_health(url, queued=0)
        assert h["busy"] and h["cancelled"] == before + 1
    finally:
        engine.gate.set()
    assert first.recv(4096).startswith(b"HTTP/1.1 200")
    first.close()
