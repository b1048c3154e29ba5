"""The connections of ``olympia serve``: uvicorn's HTTP protocol with a deadline on reading
each request and a cap on open connections.

uvicorn closes a connection idle between two requests (``timeout_keep_alive``), but it waits
without end for a new connection's first byte and for a request whose headers or body
trickle in, and it accepts connections until the process runs out of file descriptors. Each
connection here is uvicorn's own protocol, wrapped:

- a new connection that sends nothing within ``idle_timeout`` seconds is closed;
- a request must arrive whole (headers and body) within ``request_timeout`` seconds of its
  first byte; one that does not is answered 408 if its headers never ended, and closed;
- a connection opened while ``max_connections`` are open is answered 503 on its request and
  closed; one opened while ``max_connections + spare`` are open is closed at once, so that
  the server's file descriptors are never all taken by connections.
"""

from __future__ import annotations

import asyncio
import json
import resource
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from uvicorn.config import Config
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.server import ServerState

from olympia.server.errors import error_response

#: File descriptors kept for everything but connections (the store, logs, worker threads).
FD_RESERVE = 64
#: The file descriptors an unlimited ``RLIMIT_NOFILE`` is taken for.
UNLIMITED_FDS = 65536
#: Seconds a connection may stay silent: before its first request, and between requests.
IDLE_TIMEOUT = 5
#: Seconds a request may take to arrive whole, from its first byte.
REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True)
class Limits:
    """What one connection may hold.

    Args:
        max_connections: Open connections served; more are answered 503.
        idle_timeout: Seconds a connection may stay silent (also uvicorn's
            ``timeout_keep_alive``).
        request_timeout: Seconds a request may take to arrive, from its first byte.
    """

    max_connections: int
    idle_timeout: float = IDLE_TIMEOUT
    request_timeout: float = REQUEST_TIMEOUT

    @property
    def spare(self) -> int:
        """Connections beyond ``max_connections`` still accepted, to be answered 503."""
        return max(8, self.max_connections // 8)

    @staticmethod
    def fd_limit() -> int:
        """The process's file-descriptor limit (the soft ``RLIMIT_NOFILE``; an unlimited one
        counts as :data:`UNLIMITED_FDS`)."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return UNLIMITED_FDS if soft == resource.RLIM_INFINITY else soft

    @classmethod
    def default_max_connections(cls) -> int:
        """The default cap: of the descriptors the limit leaves beside :data:`FD_RESERVE`,
        seven eighths served and the last eighth for 503 answers (840 of a limit of 1024)."""
        return max(8, (cls.fd_limit() - FD_RESERVE) * 7 // 8)

    def fds_needed(self) -> int:
        """The file descriptors these limits let connections take, plus the reserve."""
        return self.max_connections + self.spare + FD_RESERVE


class _Guarded(asyncio.Protocol):
    """uvicorn's HTTP protocol for one connection, under :class:`Limits`."""

    limits: ClassVar[Limits]

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.inner: Any = AutoHTTPProtocol(  # type: ignore[call-arg]
            config=config, server_state=server_state, app_state=app_state, _loop=_loop)
        self.connections = server_state.connections
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_idle = True  # whether the timer waits for a first byte, or a request
        self.started: object = None  # the request cycle before the one being read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        self.inner.connection_made(transport)
        open_now = len(self.connections)
        if open_now > self.limits.max_connections + self.limits.spare:
            self.transport.close()
            return
        if open_now > self.limits.max_connections:
            self.inner.app = _too_many(self.limits.max_connections)
        self._arm(self.limits.idle_timeout, idle=True)

    def data_received(self, data: bytes) -> None:
        cycle = self.inner.cycle
        between = cycle is None or cycle.response_complete
        if between and (self.timer_idle or self.started is not cycle):  # a request begins
            self.started = cycle
            self._arm(self.limits.request_timeout, idle=False)
        self.inner.data_received(data)

    def _arm(self, seconds: float, *, idle: bool) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_idle = idle
        self.timer = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _expire(self) -> None:
        """Close the connection if the request being read did not arrive in time."""
        self.timer = None
        transport, cycle = self.transport, self.inner.cycle
        if transport is None or transport.is_closing():
            return
        if self.timer_idle:
            if cycle is None:  # nothing ever came
                transport.close()
            return
        if cycle is self.started:  # its headers never ended
            transport.write(_REQUEST_TIMEOUT)
            transport.close()
        elif cycle.more_body and not cycle.response_complete:  # its body never ended
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def guarded_protocol(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol under ``limits`` (for ``uvicorn.Config(http=...)``)."""

    class Guarded(_Guarded):
        pass

    Guarded.limits = limits
    return Guarded


def _too_many(cap: int) -> Any:
    """The ASGI app answering every request of a connection over the cap."""
    answer = error_response(503, "ServiceUnavailableException",
                            f"the server has too many open connections (at most {cap}): "
                            "retry later")
    answer.headers["Connection"] = "close"
    return answer


def _timeout_answer() -> bytes:
    body = json.dumps({"error": {"message": "the request did not arrive within the server's "
                                            "request timeout", "type": "RequestTimeout",
                                 "code": 408}}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


_REQUEST_TIMEOUT = _timeout_answer()
