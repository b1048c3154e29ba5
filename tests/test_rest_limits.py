"""What an unauthenticated client cannot do to others (issue 44), through `olympia serve`:
the token endpoint's bounded body, the slow-down of wrong secrets per address and per client
id, stateless access tokens, timeouts of idle and slow connections (a real slowloris socket),
and the cap on open connections with its 503. Timeouts are set to seconds and waited for as
events (the server answers or closes), never measured."""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from restserver import RestServer, request

from olympia.server.auth import Client, Throttle, Tokens

READER, WRITER = "reader-secret-77aa", "writer-secret-0b1c"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
WAIT = 30.0  # how long a socket waits for the server to answer or close (a safety net)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("limits")
    tokens = root / "tokens"
    tokens.write_text(f"analyst read-only {READER}\netl read-write {WRITER}\n")
    with RestServer.on_new_catalog(
            root, "--token-file", str(tokens), "--failed-secret-burst", "3",
            "--failed-secret-interval", "3600", "--timeout-idle", "1",
            "--timeout-request", "3") as started:  # above the 1 s hold of a refused request
        yield started
    assert not any(secret in "".join(started.log) for secret in (READER, WRITER))
    assert "Traceback" not in "".join(started.log), "".join(started.log)


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("capped")
    tokens = root / "tokens"
    tokens.write_text(f"analyst read-only {READER}\n")
    with RestServer.on_new_catalog(
            root, "--token-file", str(tokens), "--max-connections", "4", "--timeout-idle",
            "60", "--timeout-request", "60") as started:
        yield started
    assert "Traceback" not in "".join(started.log), "".join(started.log)


def post_token(server: RestServer, fields: dict[str, str], source: str = "127.0.0.1",
               ) -> tuple[int, dict[str, str], Any]:
    """``POST /v1/oauth/tokens`` from the loopback address ``source``."""
    address = urlsplit(server.url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=WAIT,
                                      source_address=(source, 0))
    try:
        conn.request("POST", "/v1/oauth/tokens", body=urlencode(fields), headers=FORM)
        answer = conn.getresponse()
        return (answer.status, {k.lower(): v for k, v in answer.getheaders()},
                json.loads(answer.read()))
    finally:
        conn.close()


def ui_sign_in(server: RestServer, fields: dict[str, str], source: str,
               ) -> tuple[int, dict[str, str], bytes]:
    """Post the UI's sign-in form from the loopback address ``source`` as a browser does:
    with the anti-forgery token and cookie of the form it was shown first."""
    address = urlsplit(server.url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=WAIT,
                                      source_address=(source, 0))
    try:
        conn.request("GET", "/ui/login")
        shown = conn.getresponse()
        token = re.search(rb'name="csrf" value="([^"]+)"', shown.read())
        nonce = (shown.getheader("set-cookie") or "").split(";")[0]
        assert token and nonce, "the sign-in form has no token"
        conn.request("POST", "/ui/login", headers={**FORM, "Cookie": nonce},
                     body=urlencode({**fields, "csrf": token.group(1).decode()}))
        answer = conn.getresponse()  # a header sent twice (set-cookie): its values joined
        return (answer.status, {k.lower(): answer.getheader(k, "") for k, _ in
                                answer.getheaders()}, answer.read())
    finally:
        conn.close()


def credentials(client_id: str, secret: str) -> dict[str, str]:
    return {"grant_type": "client_credentials", "client_id": client_id,
            "client_secret": secret}


def connect(server: RestServer, source: str = "127.0.0.1") -> socket.socket:
    """A socket to the server from the loopback address ``source`` (each test its own, as
    refused requests are counted per address)."""
    address = urlsplit(server.url)
    return socket.create_connection((address.hostname or "", address.port or 0),
                                    timeout=WAIT, source_address=(source, 0))


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_the_token_endpoint_reads_a_few_kib_at_most(server: RestServer) -> None:
    sock = connect(server, "127.0.0.20")  # 8 MB declared: refused before any of it is read
    sock.sendall(b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n"
                 b"Content-Type: application/x-www-form-urlencoded\r\n\r\ngrant_type=")
    head, _, body = read_all(sock).partition(b"\r\n\r\n")
    sock.close()
    assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
    error = json.loads(body)
    assert error["error"] == "invalid_request" and "4096 bytes" in error["error_description"]
    sock = connect(server, "127.0.0.20")  # a chunked body, no length declared, refused after 4 KiB
    sock.sendall(b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Type: application/x-www-form-urlencoded\r\n\r\n")
    sock.sendall(b"".join(b"400\r\n" + b"a" * 1024 + b"\r\n" for _ in range(8)))
    assert read_all(sock).startswith(b"HTTP/1.1 413 ")
    sock.close()
    assert post_token(server, credentials("etl", WRITER), "127.0.0.9")[0] == 200


def test_wrong_secrets_are_slowed_per_address_and_per_client_id(server: RestServer) -> None:
    # the real client of etl signs in once from its own address
    assert post_token(server, credentials("etl", WRITER), "127.0.0.5")[0] == 200
    # an attacker guessing etl's secret: three tries, then 429 before anything is checked
    for _ in range(3):
        status, _, body = post_token(server, credentials("etl", "guess"), "127.0.0.2")
        assert (status, body["error"]) == (401, "invalid_client")
    status, headers, body = post_token(server, credentials("etl", "guess"), "127.0.0.2")
    assert (status, body["error"]) == (429, "slow_down")
    assert int(headers["retry-after"]) > 0
    status, _, _ = post_token(server, credentials("etl", WRITER), "127.0.0.2")
    assert status == 429  # the address is slowed down, whatever it sends
    # from another address: etl's own budget is spent too
    assert post_token(server, credentials("etl", "guess-2"), "127.0.0.3")[0] == 429
    assert post_token(server, credentials("etl", WRITER), "127.0.0.4")[0] == 429
    # the address that signed in as etl before still gets its tokens; other ids are untouched
    status, _, body = post_token(server, credentials("etl", WRITER), "127.0.0.5")
    assert status == 200 and body["access_token"]
    assert post_token(server, credentials("analyst", READER), "127.0.0.4")[0] == 200
    # unknown ids share one budget, which no real id depends on
    for number in range(3):
        assert post_token(server, credentials(f"nobody-{number}", "x"), "127.0.0.6")[0] == 401
    assert post_token(server, credentials("someone", "x"), "127.0.0.7")[0] == 429
    assert post_token(server, credentials("analyst", READER), "127.0.0.7")[0] == 200
    # the UI's sign-in form is slowed down the same way, by address
    status, headers, page = ui_sign_in(server, {"client_id": "analyst", "secret": READER},
                                       "127.0.0.2")
    assert status == 429 and int(headers["retry-after"]) > 0
    assert b"Too many wrong credentials" in page
    # a secret sent as the bearer token is not traded, so not slowed
    assert request(server, "GET", "/v1/config",
                   headers={"Authorization": f"Bearer {WRITER}"})[0] == 200


def call(server: RestServer, token: str, source: str, method: str = "GET",
         path: str = "/v1/config", body: str | None = None) -> tuple[int, dict[str, str], Any]:
    """A request with a bearer token from the loopback address ``source``."""
    return request(server, method, path, body, {"Authorization": f"Bearer {token}"}, source)


def test_wrong_bearer_tokens_are_slowed_per_address(server: RestServer) -> None:
    for _ in range(3):
        assert call(server, "guess", "127.0.0.11")[0] == 401
    status, headers, _ = call(server, READER, "127.0.0.11")
    assert status == 429 and int(headers["retry-after"]) > 0  # a secret: not even checked
    assert call(server, READER, "127.0.0.12")[0] == 200  # another address
    # an access token cannot be guessed: it is checked even from that address (a client
    # sharing an address with an attacker keeps working with the tokens it has)
    issued = post_token(server, credentials("analyst", READER), "127.0.0.12")[2]
    assert call(server, issued["access_token"], "127.0.0.11")[0] == 200
    # refused forms count too: a throttled address is answered 429 before its body is read
    for _ in range(3):
        assert post_token(server, {"grant_type": "password"}, "127.0.0.13")[0] == 400
    sock = connect(server, "127.0.0.13")
    sock.sendall(b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n"
                 b"Content-Type: application/x-www-form-urlencoded\r\n\r\n")
    head = read_all(sock).partition(b"\r\n\r\n")[0].lower()
    sock.close()
    assert head.startswith(b"http/1.1 429 ") and b"connection: close" in head


def test_an_access_token_is_signed_and_its_claims_cannot_be_changed(
        server: RestServer) -> None:
    issued = post_token(server, credentials("analyst", READER), "127.0.0.30")[2]["access_token"]
    ns = json.dumps({"namespace": ["signed"]})
    status, _, body = call(server, issued, "127.0.0.30", "POST", "/v1/namespaces", ns)
    assert status == 403 and "client analyst is read-only" in body["error"]["message"]
    raised = issued.replace(".ro.", ".rw.")  # the access level, changed by the holder
    status, _, body = call(server, raised, "127.0.0.30", "POST", "/v1/namespaces", ns)
    assert status == 401 and body["error"]["type"] == "NotAuthorizedException"


def test_idle_connections_are_closed(server: RestServer) -> None:
    sock = connect(server, "127.0.0.22")  # never sends a byte
    assert read_all(sock) == b""
    sock.close()
    sock = connect(server, "127.0.0.22")  # one request, then silence
    sock.sendall(b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_all(sock).startswith(b"HTTP/1.1 401 ")
    sock.close()


def test_a_slowloris_is_answered_408_and_closed(server: RestServer) -> None:
    assert_slow_requests_refused(server, "127.0.0.21", "/v1/oauth/tokens")


def assert_slow_requests_refused(server: RestServer, source: str, post: str) -> None:
    """Headers that trickle in are answered 408; a body posted to ``post`` (a route that
    reads it) that trickles in is cut off."""
    sock = connect(server, source)
    sock.sendall(b"GET /v1/config HTTP/1.1\r\nHost: x\r\n")
    sock.settimeout(0.25)
    answer = b""
    for number in range(int(WAIT / 0.25)):  # a header line every quarter second
        try:
            answer = sock.recv(65536)
            break
        except TimeoutError:
            sock.sendall(b"X-Trickle-%d: y\r\n" % number)
    sock.settimeout(WAIT)
    answer += read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"request timeout" in answer
    sock.close()
    sock = connect(server, source)  # a body that trickles in: the connection is closed
    sock.sendall(b"POST " + post.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1000"
                 b"\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\ngrant_type=")
    sock.settimeout(0.25)
    closed = False
    for _ in range(int(WAIT / 0.25)):
        try:
            closed = sock.recv(65536) == b""
            break
        except TimeoutError:
            sock.sendall(b"a")
        except ConnectionResetError:
            closed = True
            break
    assert closed
    sock.close()


@pytest.fixture(scope="module")
def low_fd_limit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    """A server started with a soft file-descriptor limit of 160 and default limits."""
    root = tmp_path_factory.mktemp("low_fd")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (160, hard))
    try:
        server = RestServer.on_new_catalog(root).start()  # it inherits the limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield server
    finally:
        server.stop()
    assert "Traceback" not in "".join(server.log), "".join(server.log)


def test_the_default_cap_comes_from_the_file_descriptor_limit(low_fd_limit: RestServer,
                                                               ) -> None:
    cap = (160 - 64) * 7 // 8  # 84: of 160 descriptors, 64 kept and 7/8 of the rest served
    assert_capped(low_fd_limit, cap, max(8, cap // 8))


def test_connections_beyond_the_cap_are_answered_503(capped: RestServer) -> None:
    assert_capped(capped, 4, 8)


def assert_capped(server: RestServer, cap: int, spare: int) -> None:
    """``cap`` connections are served, the next ``spare`` answered 503, more closed."""
    held = []
    try:
        for _ in range(cap):  # the cap, held by clients that trickle headers
            sock = connect(server)
            sock.sendall(b"GET /v1/config HTTP/1.1\r\n")
            held.append(sock)
        extra = connect(server)
        extra.sendall(b"GET /v1/config HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_all(extra)
        extra.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"connection: close" in head.lower()
        assert b"retry-after: 1" in head.lower()
        error = json.loads(body)["error"]
        assert error["type"] == "ServiceUnavailableException"
        assert f"too many open connections (at most {cap})" in error["message"]
        spares = [connect(server) for _ in range(spare)]  # the spare ones fill up...
        beyond = connect(server)  # ...and one more is closed without a word
        assert read_all(beyond) == b""
        for sock in (*spares, beyond):
            sock.close()
    finally:
        for sock in held:
            sock.close()
    for _ in range(100):  # the server notices the closed connections
        if request(server, "GET", "/v1/config",
                   headers={"Authorization": f"Bearer {READER}"})[0] == 200:
            break
    else:
        pytest.fail("the server never served again")


@pytest.fixture(scope="module")
def h11_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    """A server where httptools cannot be imported, so uvicorn speaks HTTP with h11."""
    root = tmp_path_factory.mktemp("h11")
    shim = root / "shim" / "httptools"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("hidden: this server uses h11")\n')
    path = os.pathsep.join(p for p in (str(shim.parent), os.environ.get("PYTHONPATH")) if p)
    probe = subprocess.run(
        [sys.executable, "-c", "from uvicorn.protocols.http.auto import AutoHTTPProtocol as P;"
                               "print(P.__name__)"],
        env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "H11Protocol"
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path
    try:
        server = RestServer.on_new_catalog(
            root, "--max-connections", "4", "--timeout-idle", "1", "--timeout-request",
            "5").start()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    try:
        yield server
    finally:
        server.stop()
    assert "Traceback" not in "".join(server.log), "".join(server.log)


def test_the_limits_hold_when_uvicorn_speaks_h11(h11_server: RestServer) -> None:
    assert_slow_requests_refused(h11_server, "127.0.0.1", "/v1/namespaces")
    sock = connect(h11_server)  # a new connection that never sends a byte
    assert read_all(sock) == b""
    sock.close()
    assert_capped(h11_server, 4, 8)


# --- the same pieces in process, with an injected clock --------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_access_tokens_are_signed_and_expire(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "tokens"
    path.write_text(f"etl read-write {WRITER}\nanalyst read-only {READER}\n")
    tokens = Tokens.load(path, clock=clock)
    writer = tokens.check("etl", WRITER)
    assert writer == Client("etl", True) and tokens.check("etl", READER) is None
    assert tokens.check("nobody", WRITER) is None
    state = dict(vars(tokens))
    issued = [tokens.issue(writer)[0] for _ in range(1000)]
    assert vars(tokens) == state  # nothing is kept per token
    assert tokens.client_for(issued[0]) == Client("etl", True)
    reader = tokens.check("analyst", READER)
    assert reader is not None and tokens.client_for(tokens.issue(reader)[0]) == reader
    claims, _, signature = issued[0].rpartition(".")
    for forged in (claims.replace(".rw.", ".ro.") + "." + signature,
                   claims + "." + signature[:-1] + ("A" if signature[-1] != "A" else "B"),
                   claims, "", "a.b.c.d", "é.rw.1.x"):
        assert tokens.client_for(forged) is None
    assert Tokens.load(path, clock=clock).client_for(issued[0]) is None  # another process
    clock.now += 100
    assert tokens.seconds_left(issued[0]) == tokens.lifetime - 100
    assert tokens.seconds_left(WRITER) == 0
    clock.now += tokens.lifetime - 100
    assert tokens.client_for(issued[0]) is not None
    clock.now += 1
    assert tokens.client_for(issued[0]) is None
    assert tokens.signed(issued[0]) and not tokens.signed("guess")  # expired is no guess


def test_a_throttle_lets_one_more_failure_through_per_interval() -> None:
    clock = Clock()
    throttle = Throttle(burst=2, interval=10, clock=clock)
    for _ in range(2):
        assert throttle.wait("a", "etl") == 0
        throttle.failed("a", "etl")
    assert throttle.wait("a", "etl") == 10 and throttle.wait("b", "etl") == 10
    assert throttle.wait("b", "other") == 0 and throttle.wait("a", None) == 10
    clock.now += 4
    assert throttle.wait("b", "etl") == pytest.approx(6)
    clock.now += 6
    assert throttle.wait("b", "etl") == 0
    throttle.failed("b", "etl")
    throttle.succeeded("c", "etl")
    assert throttle.wait("d", "etl") == 10 and throttle.wait("c", "etl") == 0


OPS = st.lists(st.tuples(st.sampled_from(["fail", "ok", "tick"]),
                         st.integers(0, 40), st.sampled_from(["etl", "analyst", "", None]),
                         st.floats(0, 30)), max_size=200)


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_a_throttle_is_bounded_and_locks_nobody_out_for_good(
        ops: list[tuple[str, int, str | None, float]]) -> None:
    clock = Clock()
    throttle = Throttle(burst=3, interval=2, entries=8, clock=clock)
    for op, peer_number, client_id, seconds in ops:
        peer = f"10.0.0.{peer_number}"
        wait = throttle.wait(peer, client_id)
        assert 0 <= wait <= throttle.interval  # one try per interval, whatever came before
        if op == "fail" and wait == 0:
            throttle.failed(peer, client_id)
        elif op == "ok" and wait == 0 and client_id:
            throttle.succeeded(peer, client_id)
        elif op == "tick":
            clock.now += seconds
        assert len(throttle._peers) <= 8 and len(throttle._known) <= 8
        assert len(throttle._ids) <= 8
    clock.now += throttle.burst * throttle.interval  # once the failures stop
    for peer_number in range(41):
        for client_id in ("etl", "analyst", "", None):
            assert throttle.wait(f"10.0.0.{peer_number}", client_id) == 0


def test_signing_in_with_an_access_token_keeps_it(server: RestServer) -> None:
    issued = post_token(server, credentials("analyst", READER), "127.0.0.31")[2]["access_token"]
    status, headers, _ = ui_sign_in(server, {"token": issued}, "127.0.0.31")
    cookie = headers["set-cookie"]
    assert status == 303 and f"olympia_ui_token={issued};" in cookie
    assert int(cookie.split("Max-Age=")[1].split(";")[0]) <= 3600  # its own expiry
