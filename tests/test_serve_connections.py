"""orl serve at the connection level (issue 16, items 14 and 16), over raw sockets: half-sent requests
time out (the header by orl.serve.connection, the body with a 408), a client leaving mid-body leaves no
log, and bad `orl serve` flags are one-line errors with exit status 2, before the model is loaded."""
from __future__ import annotations

import logging
import socket
import time

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.cli import main
from orl.engine import Engine
from orl.serve import ServerConfig, create_app
from test_serve import ThreadedServer, counts, get, raw_socket, tiny_checkpoint

MODEL = "tiny"
READ_TIMEOUT = 1.0

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("connections"))


@pytest.fixture(scope="module")
def server(ckpt):
    model, tok, _ = load_checkpoint(ckpt)
    app = create_app(Engine(model, tok), MODEL, config=ServerConfig(read_timeout_s=READ_TIMEOUT))
    with ThreadedServer(app, read_timeout_s=READ_TIMEOUT) as url:
        yield url


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
