"""Who may call the server, declared by every route as a FastAPI dependency
(:class:`Access`), and where clients trade secrets for access tokens (the OAuth2 token
endpoint, and the checks the UI's sign-in form shares: :class:`Guard`). Request bodies from
outside are read within a bound (:func:`read_bounded`)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
from urllib.parse import parse_qs

from fastapi import Depends, FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from olympia.server.auth import Client, Throttle, Tokens
from olympia.server.errors import RestError, bad_request
from olympia.ui.login import COOKIE

READ, WRITE, ANYONE = "read", "write", "anyone"


class Access:
    """What a route does, declared by every route as a FastAPI dependency (a test walks the
    routes): ``read`` needs a client of the token file, ``write`` a read-write client, and
    ``anyone`` needs no token (the token endpoint, the sign-in form). The token file is the
    application's ``state.tokens``; without one, anyone may do anything.

    Args:
        access: ``read``, ``write`` or ``anyone``.
        cookie: Whether the UI's sign-in cookie counts as a bearer token (UI pages).
    """

    def __init__(self, access: str, *, cookie: bool = False) -> None:
        self.access = access
        self.cookie = cookie

    async def __call__(self, request: Request) -> Client | None:
        """The calling client (``None`` without a token file or for ``anyone``).

        Raises:
            HTTPException: no valid token (401), or too many wrong ones from this address
                before (429; the token is then not checked).
            RestError: a read-only client on a ``write`` route (403).
        """
        tokens: Tokens | None = request.app.state.tokens
        if tokens is None or self.access == ANYONE:
            return None
        token = _bearer(request) or (request.cookies.get(COOKIE, "") if self.cookie else "")
        client = await _identify(request, tokens, token) if token else 0.0
        if isinstance(client, float):
            if client > 0:
                raise HTTPException(429, "too many wrong tokens from this address: retry "
                                    f"after {math.ceil(client)} s",
                                    headers={"Retry-After": str(math.ceil(client))})
            raise HTTPException(401, "sign in to see the catalog: this server needs a client "
                                     "of its token file" if self.cookie else
                                "a valid bearer token is required (Authorization: Bearer "
                                "<token>)", headers={"WWW-Authenticate": "Bearer"})
        if self.access == WRITE and not client.writer:
            raise RestError(403, "ForbiddenException",
                            f"client {client.client_id} is read-only: {request.method} "
                            f"{request.url.path} is refused")
        return client


async def _identify(request: Request, tokens: Tokens, token: str) -> Client | float:
    """The client of a bearer token, or the seconds to wait (0: no client). An access token
    signed here is checked at once (it cannot be guessed; expired, it is refused); anything
    else tries a secret of the file, slowed down per address by ``app.state.throttle``."""
    if tokens.signed(token):
        return tokens.client_for(token) or 0.0
    throttle: Throttle = request.app.state.throttle
    peer = client_address(request)
    wait = throttle.wait(peer, None)
    if wait > 0:
        return await held(wait)
    client = tokens.client_for(token)
    if client is None:
        throttle.failed(peer, None)
        return 0.0
    return client


#: The longest a request refused for wrong secrets is held before its 429.
HOLD_SECONDS = 1.0


async def held(wait: float) -> float:
    """Hold a request refused for wrong secrets before answering it (at most
    :data:`HOLD_SECONDS`): a client that waits for each answer then tries once per hold at
    most, and costs the event loop a sleeping task instead of a request handled at once.

    Returns:
        ``wait``.
    """
    await asyncio.sleep(min(wait, HOLD_SECONDS))
    return wait


def client_address(request: Request) -> str:
    """The caller's address (as uvicorn gives it)."""
    return request.client.host if request.client else ""


READS, WRITES, ANYONE_MAY = Access(READ), Access(WRITE), Access(ANYONE)
UI_READS = Access(READ, cookie=True)


def signed_in(tokens: Tokens, token: str) -> str | None:
    """The client id of an access token signed here and not expired (the UI's cookie)."""
    client = tokens.client_for(token) if tokens.signed(token) else None
    return client.client_id if client else None


def _bearer(request: Request) -> str:
    """The token of the request's ``Authorization: Bearer`` header ("" without one)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


TOKEN_PATH = "/v1/oauth/tokens"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
#: The largest body of the token endpoint and of the sign-in form (their fields are short).
CREDENTIALS_BODY_BYTES = 4096


class Guard:
    """Where clients trade secrets for access tokens without a token (the token endpoint and
    the UI's sign-in form): bodies bounded to :data:`CREDENTIALS_BODY_BYTES` and parsed in
    a worker thread, and wrong secrets slowed down by a :class:`Throttle`.

    Args:
        throttle: The slow-down of wrong secrets.
    """

    def __init__(self, throttle: Throttle) -> None:
        self.throttle = throttle

    async def form(self, request: Request) -> dict[str, str]:
        """The request's URL-encoded form (first value of each field).

        Raises:
            RestError: a body over the bound (413), or not UTF-8 (400).
        """
        data = await read_bounded(request, CREDENTIALS_BODY_BYTES)
        return await run_in_threadpool(_parse_form, data)

    async def trade(self, tokens: Tokens, request: Request, client_id: str | None,
                    secret: str) -> tuple[str, int] | float:
        """An access token and its lifetime for a client id and secret (``client_id``
        ``None``: ``secret`` is a bearer token, a secret of the file or an access token, kept
        as it is), or the seconds to wait: 0 when they are wrong, more when this peer or id
        has no failure left (nothing is then checked)."""
        if client_id is None:  # an access token is kept as it is, to expire when it does
            found = await _identify(request, tokens, secret)
            if isinstance(found, float):
                return found
            left = tokens.seconds_left(secret)
            return (secret, left) if left else tokens.issue(found)
        peer = client_address(request)
        bucket = client_id if tokens.knows(client_id) else ""
        wait = self.throttle.wait(peer, bucket)
        if wait > 0:
            return await held(wait)
        client = tokens.check(client_id, secret)
        if client is None:
            self.throttle.failed(peer, bucket)
            return 0.0
        self.throttle.succeeded(peer, client_id)
        return tokens.issue(client)

    async def sign_in(self, tokens: Tokens, request: Request) -> tuple[str, int] | float:
        """The UI's sign-in form (:data:`olympia.ui.login.SignIn`): a client id and secret,
        or a secret or access token of the file given as the bearer token; the cookie
        never holds a secret."""
        try:
            form = await self.form(request)
        except RestError:  # too large or not UTF-8: refused as wrong credentials are
            self.throttle.failed(client_address(request), None)
            return 0.0
        client_id, secret = form.get("client_id", "").strip(), form.get("secret", "").strip()
        if client_id or secret:
            return await self.trade(tokens, request, client_id, secret)
        token = form.get("token", "").strip()
        return await self.trade(tokens, request, None, token) if token else 0.0


def _parse_form(data: bytes) -> dict[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("the form is not UTF-8") from None
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}


def add_token_endpoint(app: FastAPI, tokens: Tokens, guard: Guard) -> None:
    """The OAuth2 client-credentials token endpoint."""

    @app.post(TOKEN_PATH, dependencies=[Depends(ANYONE_MAY)])
    async def _token(request: Request) -> Response:  # after _TokenDoor's check

        def refused(status: int, error: str, description: str) -> Response:
            guard.throttle.failed(client_address(request), None)  # every refused form counts
            return oauth_error(status, error, description)

        try:
            form = await guard.form(request)
        except RestError as exc:  # the rest of its body is not read: close the connection
            answer = refused(exc.status, "invalid_request", exc.message)
            answer.headers["Connection"] = "close"
            return answer
        client_id, secret = form.get("client_id"), form.get("client_secret")
        scheme, _, basic = request.headers.get("authorization", "").partition(" ")
        if client_id is None and scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(basic.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return refused(400, "invalid_request", "malformed Basic credentials")
            client_id, _, secret = decoded.partition(":")
        if form.get("grant_type") != "client_credentials":
            return refused(400, "unsupported_grant_type",
                           "only the client_credentials grant is supported")
        issued = await guard.trade(tokens, request, client_id or "", secret or "")
        if isinstance(issued, float):
            if issued > 0:
                return slow_down(issued)
            return oauth_error(401, "invalid_client", "unknown client id or wrong secret")
        token, lifetime = issued
        return Response(json.dumps({"access_token": token, "token_type": "bearer",
                                    "expires_in": lifetime,
                                    "issued_token_type": ACCESS_TOKEN_TYPE}),
                        media_type="application/json")


def slow_down(wait: float) -> Response:
    """The token endpoint's 429 (with ``Retry-After``; the connection is closed, as the
    request's body may not have been read)."""
    seconds = str(math.ceil(wait))
    answer = oauth_error(429, "slow_down", "too many refused requests from this address or "
                          f"for this client id: retry after {seconds} s")
    answer.headers.update({"Retry-After": seconds, "Connection": "close"})
    return answer


def oauth_error(status: int, error: str, description: str) -> Response:
    """The OAuth2 error form (RFC 6749 section 5.2) the token endpoint answers with."""
    return Response(json.dumps({"error": error, "error_description": description}),
                    status_code=status, media_type="application/json")



async def read_bounded(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:  # nobody to answer; nothing was done
        raise bad_request("the client went away before its request body ended") from None
    return b"".join(chunks)




def _too_large(limit: int) -> RestError:
    return RestError(413, "BadRequestException",
                     f"the request body is larger than this server accepts ({limit} bytes)")

