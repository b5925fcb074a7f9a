"""Security defaults of orl serve (issue 16, item 19), over real HTTP: JSON bodies only, Host checked
(DNS rebinding), no cross-site calls and no CORS unless configured, no /docs by default, the API key
in OpenAI's 401 shape, and the page's headers."""
from __future__ import annotations

import json
import re

import openai
import pytest

from orl.checkpoint import load_checkpoint
from orl.engine import Engine
from orl.serve import ServerConfig, create_app
from orl.serve.config import API_KEY_ENV
from test_serve import SETTINGS, ThreadedServer, request, tiny_checkpoint

MODEL = "tiny"
BODY = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 4, **SETTINGS}).encode()
JSON = {"Content-Type": "application/json"}
KEY = "s3cret-key"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    model, tok, _ = load_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("security")))
    return Engine(model, tok)


@pytest.fixture(scope="module")
def default_server(engine):
    with ThreadedServer(create_app(engine, MODEL)) as url:
        yield url


@pytest.fixture(scope="module")
def open_server(engine):
    """Everything configured: a key, a public name, one CORS origin, the docs."""
    cfg = ServerConfig(api_key=KEY, allowed_hosts=("api.example.com", ".lan"),
                       cors_origins=("https://app.example.com",), docs=True)
    with ThreadedServer(create_app(engine, MODEL, config=cfg)) as url:
        yield url


def error(data: bytes) -> dict:
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_bodies_must_be_declared_json(default_server, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    status, _, data = request(default_server, "POST", "/v1/completions", BODY, headers)
    assert status == 415 and error(data)["code"] == "unsupported_media_type"


def test_json_with_charset_is_accepted(default_server):
    status, _, _ = request(default_server, "POST", "/v1/completions", BODY,
                           {"Content-Type": "application/json; charset=utf-8"})
    assert status == 200


@pytest.mark.parametrize("host,ok", [("127.0.0.1", True), ("localhost:8000", True), ("[::1]:8000", True),
                                     ("10.1.2.3:8000", True), ("evil.example:8000", False),
                                     ("127.0.0.1.evil.example", False), ("localhost.evil.example", False)])
def test_host_header_is_checked(default_server, host, ok):
    """A DNS-rebinding page reaches the server under the attacker's name; an IP address or localhost
    cannot be rebound."""
    status, _, data = request(default_server, "POST", "/v1/completions", BODY, {**JSON, "Host": host})
    if ok:
        assert status == 200, data
    else:
        assert status == 403 and error(data)["code"] == "host_not_allowed" and "--allowed-hosts" in error(data)["message"]


def test_cross_site_requests_are_refused(default_server):
    host = default_server.removeprefix("http://")
    status, headers, data = request(default_server, "POST", "/v1/completions", BODY,
                                    {**JSON, "Origin": "https://evil.example"})
    assert status == 403 and error(data)["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in headers
    status, headers, _ = request(default_server, "OPTIONS", "/v1/completions", None, {
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert status >= 400 and "access-control-allow-origin" not in headers  # no CORS preflight passes
    status, _, _ = request(default_server, "POST", "/v1/completions", BODY, {**JSON, "Origin": f"http://{host}"})
    assert status == 200  # the page at / calls its own origin
    for origin in ("http://[::1", "null", ""):  # malformed, sandboxed or empty: refused, not a 500
        status, _, data = request(default_server, "GET", "/health", None, {"Origin": origin})
        assert status == 403 and error(data)["code"] == "origin_not_allowed"


def test_no_docs_by_default(default_server):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert request(default_server, "GET", path)[0] == 404


def test_security_headers(default_server):
    status, headers, page = request(default_server, "GET", "/")
    assert status == 200 and b"<script" in page
    assert headers["x-content-type-options"] == "nosniff"
    csp = headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert not re.search(rb"<script>|<style|\sstyle=|\son[a-z]+=", page)  # nothing inline the CSP would block
    for path in ("/health", "/web/app.js"):
        assert request(default_server, "GET", path)[1]["x-content-type-options"] == "nosniff"


def test_api_key(open_server):
    status, headers, data = request(open_server, "POST", "/v1/completions", BODY, JSON)
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    err = error(data)
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_api_key"
    for auth in (f"Bearer {KEY}x", KEY, f"Basic {KEY}"):
        status, _, data = request(open_server, "POST", "/v1/completions", BODY, {**JSON, "Authorization": auth})
        assert status == 401 and error(data)["message"] == "incorrect API key provided"
    assert request(open_server, "GET", "/v1/models")[0] == 401
    status, _, _ = request(open_server, "POST", "/v1/completions", BODY, {**JSON, "Authorization": f"Bearer {KEY}"})
    assert status == 200
    for path in ("/health", "/", "/web/app.js"):  # no secrets there; the page takes the key as /#key=...
        assert request(open_server, "GET", path)[0] == 200


def test_api_key_with_the_openai_client(open_server):
    good = openai.OpenAI(base_url=open_server + "/v1", api_key=KEY, max_retries=0)
    assert good.completions.create(model=MODEL, prompt="hi", max_tokens=4, extra_body=SETTINGS).usage.completion_tokens == 4
    bad = openai.OpenAI(base_url=open_server + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="incorrect API key"):
        bad.models.list()


def test_configured_hosts_origins_and_docs(open_server):
    auth = {**JSON, "Authorization": f"Bearer {KEY}"}
    for host, want in (("api.example.com", 200), ("box.lan:8000", 200), ("lan", 200), ("evil.example", 403)):
        assert request(open_server, "POST", "/v1/completions", BODY, {**auth, "Host": host})[0] == want, host
    status, headers, _ = request(open_server, "POST", "/v1/completions", BODY,
                                 {**auth, "Origin": "https://app.example.com"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example.com"
    status, headers, _ = request(open_server, "OPTIONS", "/v1/completions", None, {
        "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example.com"
    status, headers, data = request(open_server, "POST", "/v1/completions", BODY, {**JSON, "Origin": "https://app.example.com"})
    assert status == 401 and headers["access-control-allow-origin"] == "https://app.example.com"  # readable refusal
    assert request(open_server, "POST", "/v1/completions", BODY, {**auth, "Origin": "https://evil.example"})[0] == 403
    assert request(open_server, "GET", "/openapi.json")[0] == 200
    status, headers, _ = request(open_server, "GET", "/docs")
    assert status == 200 and "content-security-policy" not in headers  # its page loads scripts from a CDN


def test_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert ServerConfig.with_env_key().api_key == "from-env"
    assert ServerConfig.with_env_key(api_key="flag").api_key == "flag"
    monkeypatch.delenv(API_KEY_ENV)
    assert ServerConfig.with_env_key().api_key is None
    with pytest.raises(ValueError, match="API key is empty"):
        ServerConfig(api_key=" ").validate()
