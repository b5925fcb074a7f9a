"""Request guard of `orl serve`: what a web page on another site, a DNS-rebinding attacker or a client
without the API key can and cannot do. Checked in this order, before any route runs:

1. Host: IP literals and `localhost` always pass (DNS rebinding needs the attacker's domain name in
   Host), as does the --host name; any other name only if listed in --allowed-hosts. Else 403.
2. Origin: a browser request from another origin is refused (403) unless that origin is in
   --cors-origins. Same-origin requests (the page at `/`) and non-browser clients (no Origin) pass.
3. API key: with --api-key / ORL_API_KEY, every /v1/ path needs `Authorization: Bearer <key>`, else 401.
4. POST bodies must be declared `Content-Type: application/json`, else 415: a cross-site form or
   `text/plain` fetch cannot be a "simple" request that skips the browser's CORS preflight.

Every response carries X-Content-Type-Options: nosniff and a Content-Security-Policy that allows the
page's own scripts and styles only. Errors use OpenAI's error shape.
"""
from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orl.serve.config import ServerConfig
from orl.serve.protocol import APIError

CSP = ("default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")  # their pages load scripts from a CDN


def host_name(host: str) -> str | None:
    """'example.com:8000' -> 'example.com', '[::1]:80' -> '::1'; None when malformed."""
    try:
        return urlsplit("//" + host).hostname
    except ValueError:
        return None


def same_origin(origin: str, host: str | None) -> bool:
    """Whether an Origin header names the server itself (the page at `/`); a malformed one does not."""
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return bool(netloc) and netloc.lower() == (host or "").lower()


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """Pure ASGI middleware (a BaseHTTPMiddleware would buffer the event streams)."""

    def __init__(self, app: ASGIApp, cfg: ServerConfig):
        self.app, self.cfg = app, cfg
        names = [h.lower() for h in cfg.allowed_hosts]
        bind = cfg.host.lower()
        self.any_host = "*" in names
        self.hosts = {n for n in names if not n.startswith(".")} | {"localhost"} | ({bind} if not is_ip(bind) else set())
        self.host_suffixes = tuple(n for n in names if n.startswith("."))
        self.key = cfg.api_key.encode() if cfg.api_key else None

    def host_allowed(self, host: str | None) -> bool:
        if host is None or self.any_host:  # no Host: HTTP/1.0 from a non-browser client
            return True
        name = host_name(host)
        if name is None:
            return False
        return is_ip(name) or name in self.hosts or name.endswith(self.host_suffixes) or ("." + name) in self.host_suffixes

    def check(self, method: str, path: str, headers: dict[str, str]) -> APIError | None:
        host = headers.get("host")
        if not self.host_allowed(host):
            return APIError(403, f"Host {host!r} is not allowed: start the server with --allowed-hosts "
                                 f"{host_name(host) or host} to serve it under that name", code="host_not_allowed")
        origin = headers.get("origin")
        if origin is not None and not same_origin(origin, host) and not (
                origin in self.cfg.cors_origins or "*" in self.cfg.cors_origins):
            return APIError(403, f"requests from pages of origin {origin!r} are not allowed: start the server with "
                                 f"--cors-origins {origin} to allow them", code="origin_not_allowed")
        if self.key is not None and path.startswith("/v1/"):
            auth = headers.get("authorization", "")
            scheme, _, token = auth.partition(" ")
            if not auth:
                return APIError(401, "no API key given: send the header 'Authorization: Bearer <key>'",
                                code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.key):
                return APIError(401, "incorrect API key provided", code="invalid_api_key",
                                headers={"WWW-Authenticate": "Bearer"})
        if method == "POST":
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json":
                return APIError(415, f"request bodies must be sent as 'Content-Type: application/json', got "
                                     f"{media or 'no Content-Type'!r}", code="unsupported_media_type")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        extra = [(b"x-content-type-options", b"nosniff")]
        if not (self.cfg.docs and path in DOCS_PATHS):
            extra.append((b"content-security-policy", CSP.encode()))

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        error = self.check(scope["method"], path, headers)
        if error is None:
            await self.app(scope, receive, send_secured)
        else:
            await JSONResponse(error.body(), status_code=error.status, headers=error.headers)(scope, receive, send_secured)
