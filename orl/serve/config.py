"""ServerConfig: every knob of `orl serve` (limits and security), validated before the model is loaded so a
bad flag costs a one-line error instead of a traceback after a long load."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

API_KEY_ENV = "ORL_API_KEY"


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000                       # 0: any free port
    queue_size: int = 64                   # requests that may wait for the engine (the running one not counted)
    timeout_s: float = 600.0               # arrival -> last token, queue wait included; then 504
    read_timeout_s: float = 10.0           # to send a request's headers, and then its body; then closed / 408
    max_body_bytes: int = 1 << 20          # larger bodies get 413
    api_key: str | None = None             # when set, /v1/* need `Authorization: Bearer <key>`
    allowed_hosts: tuple[str, ...] = ()    # Host names accepted besides IP literals, localhost and --host; "*": any
    cors_origins: tuple[str, ...] = ()     # origins other sites' pages may call from (CORS); "*": any
    docs: bool = False                     # serve /docs and /openapi.json (their page loads scripts from a CDN)

    def validate(self) -> "ServerConfig":
        problems = []
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            problems.append(f"port must be in 0..65535, got {self.port}")
        if self.queue_size < 1:
            problems.append(f"queue size must be >= 1, got {self.queue_size}")
        for name in ("timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                problems.append(f"{name.removesuffix('_s').replace('_', ' ')} must be a positive number of seconds, got {value}")
        if self.max_body_bytes < 1:
            problems.append(f"max body bytes must be >= 1, got {self.max_body_bytes}")
        if self.api_key is not None and not self.api_key.strip():
            problems.append("the API key is empty; give a non-empty key or none")
        for origin in self.cors_origins:
            u = urlsplit(origin)
            if origin != "*" and not (u.scheme in ("http", "https") and u.netloc and not u.path.strip("/")):
                problems.append(f"CORS origin {origin!r} is not of the form http(s)://host[:port] or '*'")
        if problems:
            raise ValueError("invalid server settings: " + "; ".join(problems))
        return self

    @classmethod
    def with_env_key(cls, **kw) -> "ServerConfig":
        """The API key may come from ORL_API_KEY, which keeps it out of the process list."""
        if kw.get("api_key") is None and os.environ.get(API_KEY_ENV):
            kw["api_key"] = os.environ[API_KEY_ENV]
        return cls(**kw)
