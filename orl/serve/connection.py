"""HTTP/1.1 connections with a header read timeout.

uvicorn arms no timer until a connection's first response, and cancels its keep-alive timer on any
byte received, so a client that sends half a request header (or one byte every few seconds) holds
a connection for ever. Here a connection must deliver a complete request header within
read_timeout_s of opening, or of the end of its previous response; otherwise it is closed. The body
has its own timeout in the app (408), where its reading happens.
"""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol


class TimedH11Protocol(H11Protocol):
    read_timeout_s: float = 10.0  # set per server by timed_protocol()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        """Wait for the header of the request after self.cycle (None: the first one)."""
        self._disarm()
        self._waiting_after = self.cycle
        self._header_timer = self.loop.call_later(self.read_timeout_s, self._header_timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_seen(self) -> None:
        if self._header_timer is not None and self.cycle is not self._waiting_after:  # a new request began
            self._disarm()

    def _header_timeout(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._header_seen()

    def on_response_complete(self) -> None:
        self._arm()
        super().on_response_complete()  # may start a pipelined request at once
        self._header_seen()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def timed_protocol(read_timeout_s: float) -> type[TimedH11Protocol]:
    return type("TimedH11Protocol", (TimedH11Protocol,), {"read_timeout_s": read_timeout_s})
