"""The HTTP side of the REST catalog: routes of the Iceberg REST Catalog OpenAPI
specification, request bodies read within a bound and parsed with pyiceberg's models, and
every error answered as an ``ErrorModel``. The catalog routes are served three times: at
``/v1`` (the latest catalog), at ``/v1/version-<n>`` (catalog version ``n``, read-only; a
write there is a 403 naming the version) and at ``/v1/txn-<id>`` (inside distributed
transaction ``<id>``; so are names under ``sys.dtxns.<id>``: see
:mod:`olympia.server.transactions`).

Paths are routed on the bytes the client sent: a name such as ``a/b`` arrives as one
percent-encoded segment and is decoded here, so no name can add a path step. A namespace
segment holding the separator ``%1F`` names a multi-level namespace: a create or any other
write there is refused (400), and a read answers that the object does not exist (404 of the
object's kind), since no Olympia namespace has more than one level. Clients probe such names:
Iceberg's Spark catalog reads ``ns.t.snapshots`` first as table ``snapshots`` in namespace
``ns.t`` and, on ``NoSuchTableException``, as the ``snapshots`` metadata table of ``ns.t``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qs, unquote_to_bytes

import pydantic
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from pyiceberg.typedef import IcebergBaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from olympia.server import transactions
from olympia.server.auth import Client, Throttle, Tokens
from olympia.server.errors import (
    EXPECTED,
    RestError,
    bad_request,
    error_response,
    response_for,
)
from olympia.server.models import (
    CommitTableBody,
    CommitTransactionBody,
    CommitViewBody,
    CreateNamespaceBody,
    CreateTableBody,
    CreateViewBody,
    RegisterTableBody,
    RenameTableBody,
    ReportMetricsBody,
    UpdateNamespacePropertiesBody,
)
from olympia.server.service import TXN_PREFIX, VERSION_PREFIX, CatalogService, Page
from olympia.server.transactions import SYSTEM, SystemNamespaces
from olympia.ui import create_ui
from olympia.ui.login import COOKIE, SignInPages

M = TypeVar("M", bound=pydantic.BaseModel)
T = TypeVar("T")
PageToken = Annotated[str | None, Query(alias="pageToken")]
PageSize = Annotated[int | None, Query(alias="pageSize")]
Purge = Annotated[bool, Query(alias="purgeRequested")]

#: The default bound of a request body.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: The separator of namespace levels in a path (``%1F`` on the wire).
NAMESPACE_SEPARATOR = "\x1f"

NS = "/namespaces/{namespace}"
TABLE = NS + "/tables/{table}"
VIEW = NS + "/views/{view}"
#: What ``GET /v1/config`` lists (the specification's form: ``{prefix}`` is empty, or
#: ``version-<n>`` for a catalog version).
ENDPOINTS = tuple(f"{method} /v1/{{prefix}}/{path}" for method, path in (
    ("GET", "namespaces"), ("POST", "namespaces"),
    ("GET", "namespaces/{namespace}"), ("HEAD", "namespaces/{namespace}"),
    ("DELETE", "namespaces/{namespace}"), ("POST", "namespaces/{namespace}/properties"),
    ("GET", "namespaces/{namespace}/tables"), ("POST", "namespaces/{namespace}/tables"),
    ("GET", "namespaces/{namespace}/tables/{table}"),
    ("HEAD", "namespaces/{namespace}/tables/{table}"),
    ("POST", "namespaces/{namespace}/tables/{table}"),
    ("DELETE", "namespaces/{namespace}/tables/{table}"),
    ("POST", "namespaces/{namespace}/register"), ("POST", "tables/rename"),
    ("POST", "namespaces/{namespace}/tables/{table}/metrics"),
    ("POST", "transactions/commit"),
    ("GET", "namespaces/{namespace}/views"), ("POST", "namespaces/{namespace}/views"),
    ("GET", "namespaces/{namespace}/views/{view}"),
    ("HEAD", "namespaces/{namespace}/views/{view}"),
    ("POST", "namespaces/{namespace}/views/{view}"),
    ("DELETE", "namespaces/{namespace}/views/{view}"), ("POST", "views/rename"),
))


class _RawPath:
    """Route on the path as sent (percent-encoded), not as the ASGI server decoded it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw is not None:
            scope = {**scope, "path": raw.decode("latin-1").split("?", 1)[0]}
        await self.app(scope, receive, send)


class _TokenDoor:
    """Answer ``POST /v1/oauth/tokens`` 429 from an address with no failure left before the
    application sees it (held first, as every such answer is: :func:`_held`): a client
    refused again and again costs the event loop no routing, and its body is not read."""

    def __init__(self, app: ASGIApp, throttle: Throttle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == TOKEN_PATH):
            wait = self.throttle.wait(scope["client"][0] if scope.get("client") else "", None)
            if wait > 0:
                await _slow_down(await _held(wait))(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(service: CatalogService, *, max_body_bytes: int = MAX_BODY_BYTES,
               tokens: Tokens | None = None, throttle: Throttle | None = None) -> ASGIApp:
    """The REST catalog application.

    Args:
        service: The catalog operations (one per server process).
        max_body_bytes: The largest request body accepted; a larger one is answered 413.
        tokens: Who may call (``None``: anyone). Every route declares its :class:`Access`:
            reads need a bearer token of the file (401 without a valid one), writes a
            read-write client (403 for a read-only one); ``/v1/oauth/tokens`` and the UI's
            sign-in form need none.
        throttle: The slow-down of wrong secrets at those two (default: :class:`Throttle`).

    Returns:
        The ASGI application.
    """
    app = FastAPI(title="Olympia Iceberg REST catalog", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.service, app.state.tokens = service, tokens
    app.state.throttle = throttle = throttle or Throttle()
    guard = Guard(throttle) if tokens is not None else None
    if tokens is not None and guard is not None:
        _add_token_endpoint(app, tokens, guard)

    async def _error(request: Request, exc: Exception) -> Response:
        return response_for(exc, head=request.method == "HEAD")

    for kind in (*EXPECTED, Exception):  # Exception: the unexpected, logged with traceback
        app.add_exception_handler(kind, _error)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        kind = {401: "NotAuthorizedException", 404: "NoSuchRouteException",
                405: "MethodNotAllowedException", 429: "NotAuthorizedException"}
        message = (f"no route {request.method} {request.url.path}" if exc.status_code == 404
                   else f"{request.method} is not allowed on {request.url.path}"
                   if exc.status_code == 405 else str(exc.detail))
        answer = error_response(exc.status_code, kind.get(exc.status_code, "RESTException"),
                                message, head=request.method == "HEAD")
        answer.headers.update(exc.headers or {})
        return answer

    @app.exception_handler(RequestValidationError)
    async def _bad_parameter(request: Request, exc: RequestValidationError) -> Response:
        return error_response(400, "BadRequestException", _describe(exc.errors()),
                              head=request.method == "HEAD")

    async def body(request: Request, model: type[M]) -> M:
        data = await _read_bounded(request, max_body_bytes)
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, RecursionError):
            raise bad_request("the request body is not JSON text") from None
        except json.JSONDecodeError as exc:
            raise bad_request(f"malformed JSON in the request body ({exc.msg} at line "
                              f"{exc.lineno} column {exc.colno})") from None
        if not isinstance(parsed, dict):
            raise bad_request("the request body must be a JSON object")
        try:
            return model.model_validate(parsed)
        except pydantic.ValidationError as exc:
            raise bad_request(_describe(exc.errors(include_input=False, include_url=False))
                              ) from None

    async def call(fn: Callable[..., T], *args: Any) -> T:
        return await run_in_threadpool(fn, *args)

    def page(page_token: str | None, page_size: int | None) -> Page:
        if page_size is not None and page_size < 1:
            raise bad_request(f"pageSize must be a positive number, got {page_size}")
        return Page(page_token or None, page_size)

    @app.get("/v1/config", dependencies=[Depends(READS)])
    async def get_config(warehouse: str | None = None) -> Response:
        return _json(service.config(warehouse, ENDPOINTS))

    catalog = APIRouter()

    # --- namespaces -----------------------------------------------------------------

    @catalog.get("/namespaces")
    async def list_namespaces(source: Reader, parent: str | None = None,
                              page_token: PageToken = None,
                              page_size: PageSize = None) -> Response:
        levels = parent.split(NAMESPACE_SEPARATOR) if parent is not None else []
        if system(source, levels) or (tuple(levels) == SYSTEM[:1] and system(source, SYSTEM)):
            return _json(await call(SystemNamespaces(source).list_namespaces, levels,
                                    page(page_token, page_size)))
        where = existing_namespace(parent) if parent is not None else None
        return _json(await call(source.list_namespaces, where,
                                page(page_token, page_size)))

    @catalog.post("/namespaces")
    async def create_namespace(request: Request, target: Writer) -> Response:
        parsed = await body(request, CreateNamespaceBody)
        if system(target, parsed.namespace):
            return _json(await call(SystemNamespaces(target).begin, parsed.namespace,
                                    parsed.properties))
        target = await call(transactions.target, target, [parsed.namespace])
        return _json(await call(target.create_namespace, parsed))

    @catalog.get(NS)
    async def load_namespace(source: Reader, namespace: str) -> Response:
        levels = levels_of(namespace)
        if system(source, levels):
            return _json(await call(SystemNamespaces(source).load, levels))
        return _json(await call(source.load_namespace,
                                read_namespace_of(namespace)))

    @catalog.head(NS)
    async def namespace_exists(source: Reader, namespace: str) -> Response:
        levels = levels_of(namespace)
        if system(source, levels):
            found = await call(SystemNamespaces(source).exists, levels)
        else:
            found = await call(source.namespace_exists, read_namespace_of(namespace))
        return Response(status_code=204 if found else 404)

    @catalog.delete(NS)
    async def drop_namespace(target: Writer, namespace: str) -> Response:
        levels = levels_of(namespace)
        if system(target, levels):
            await call(SystemNamespaces(target).drop, levels)
        else:
            await call(target.drop_namespace, namespace_of(namespace))
        return Response(status_code=204)

    @catalog.post(NS + "/properties")
    async def update_namespace_properties(request: Request, target: Writer,
                                          namespace: str) -> Response:
        parsed = await body(request, UpdateNamespacePropertiesBody)
        levels = levels_of(namespace)
        if system(target, levels):
            return _json(await call(SystemNamespaces(target).update, levels, parsed))
        return _json(await call(target.update_namespace_properties, namespace_of(namespace),
                                parsed))

    # --- tables ---------------------------------------------------------------------

    @catalog.get(NS + "/tables")
    async def list_tables(source: Reader, namespace: str, page_token: PageToken = None,
                          page_size: PageSize = None) -> Response:
        if system(source, levels_of(namespace)):  # sys... holds namespaces only
            return _json({"identifiers": [], "next-page-token": None})
        return _json(await call(source.list_tables,
                                read_namespace_of(namespace),
                                page(page_token, page_size)))

    @catalog.post(NS + "/tables")
    async def create_table(request: Request, target: Writer, namespace: str) -> Response:
        parsed = await body(request, CreateTableBody)
        return _model(await call(target.create_table, namespace_of(namespace), parsed))

    @catalog.get(TABLE)
    async def load_table(source: Reader, namespace: str, table: str,
                         snapshots: str = "all") -> Response:
        return Response(await call(source.load_table,
                                   read_namespace_of(namespace, "table", table),
                                   name_of(table), snapshots), media_type="application/json")

    @catalog.head(TABLE)
    async def table_exists(source: Reader, namespace: str, table: str) -> Response:
        found = await call(source.table_exists,
                           read_namespace_of(namespace, "table", table), name_of(table))
        return Response(status_code=204 if found else 404)

    @catalog.post(TABLE)
    async def commit_table(request: Request, target: Writer, namespace: str,
                           table: str) -> Response:
        parsed = await body(request, CommitTableBody)
        return _model(await call(target.commit_table, namespace_of(namespace),
                                 name_of(table), parsed))

    @catalog.delete(TABLE)
    async def drop_table(target: Writer, namespace: str, table: str,
                         purge: Purge = False) -> Response:
        await call(target.drop_table, namespace_of(namespace), name_of(table), purge)
        return Response(status_code=204)

    @catalog.post(NS + "/register")
    async def register_table(request: Request, target: Writer, namespace: str) -> Response:
        parsed = await body(request, RegisterTableBody)
        return _model(await call(target.register_table, namespace_of(namespace), parsed))

    @catalog.post("/tables/rename")
    async def rename_table(request: Request, target: Writer) -> Response:
        parsed = await body(request, RenameTableBody)
        target = await call(transactions.target, target,
                            [parsed.source.namespace.root, parsed.destination.namespace.root])
        await call(target.rename_table, parsed)
        return Response(status_code=204)

    @catalog.post(TABLE + "/metrics")
    async def report_metrics(request: Request, source: Reader, namespace: str,
                             table: str) -> Response:
        await body(request, ReportMetricsBody)
        await call(source.require_table,
                   read_namespace_of(namespace, "table", table), name_of(table))
        return Response(status_code=204)

    @catalog.post("/transactions/commit")
    async def commit_transaction(request: Request, target: Writer) -> Response:
        parsed = await body(request, CommitTransactionBody)
        target = await call(transactions.target, target,
                            [change.identifier.namespace.root for change in parsed.table_changes])
        await call(target.commit_transaction, parsed)
        return Response(status_code=204)

    # --- views ----------------------------------------------------------------------

    @catalog.get(NS + "/views")
    async def list_views(source: Reader, namespace: str, page_token: PageToken = None,
                         page_size: PageSize = None) -> Response:
        if system(source, levels_of(namespace)):
            return _json({"identifiers": [], "next-page-token": None})
        return _json(await call(source.list_views,
                                read_namespace_of(namespace),
                                page(page_token, page_size)))

    @catalog.post(NS + "/views")
    async def create_view(request: Request, target: Writer, namespace: str) -> Response:
        parsed = await body(request, CreateViewBody)
        return _model(await call(target.create_view, namespace_of(namespace), parsed))

    @catalog.get(VIEW)
    async def load_view(source: Reader, namespace: str, view: str) -> Response:
        return _model(await call(source.load_view,
                                 read_namespace_of(namespace, "view", view), name_of(view)))

    @catalog.head(VIEW)
    async def view_exists(source: Reader, namespace: str, view: str) -> Response:
        found = await call(source.view_exists,
                           read_namespace_of(namespace, "view", view), name_of(view))
        return Response(status_code=204 if found else 404)

    @catalog.post(VIEW)
    async def replace_view(request: Request, target: Writer, namespace: str, view: str) -> Response:
        parsed = await body(request, CommitViewBody)
        return _model(await call(target.replace_view, namespace_of(namespace), name_of(view),
                                 parsed))

    @catalog.delete(VIEW)
    async def drop_view(target: Writer, namespace: str, view: str) -> Response:
        await call(target.drop_view, namespace_of(namespace), name_of(view))
        return Response(status_code=204)

    @catalog.post("/views/rename")
    async def rename_view(request: Request, target: Writer) -> Response:
        parsed = await body(request, RenameTableBody)
        target = await call(transactions.target, target,
                            [parsed.source.namespace.root, parsed.destination.namespace.root])
        await call(target.rename_view, parsed)
        return Response(status_code=204)

    app.include_router(catalog, prefix="/v1")
    app.include_router(catalog, prefix="/v1/" + VERSION_PREFIX.format("{version}"))
    app.include_router(catalog, prefix="/v1/" + TXN_PREFIX.format("{txn}"))
    _add_ui(app, service, tokens, guard)
    return _RawPath(app if tokens is None else _TokenDoor(app, throttle))


UI_PATH = "/ui"
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
    peer = _peer(request)
    wait = throttle.wait(peer, None)
    if wait > 0:
        return await _held(wait)
    client = tokens.client_for(token)
    if client is None:
        throttle.failed(peer, None)
        return 0.0
    return client


#: The longest a request refused for wrong secrets is held before its 429.
HOLD_SECONDS = 1.0


async def _held(wait: float) -> float:
    """Hold a request refused for wrong secrets before answering it (at most
    :data:`HOLD_SECONDS`): a client that waits for each answer then tries once per hold at
    most, and costs the event loop a sleeping task instead of a request handled at once.

    Returns:
        ``wait``.
    """
    await asyncio.sleep(min(wait, HOLD_SECONDS))
    return wait


def _peer(request: Request) -> str:
    """The caller's address (as uvicorn gives it)."""
    return request.client.host if request.client else ""


READS, WRITES, ANYONE_MAY = Access(READ), Access(WRITE), Access(ANYONE)
UI_READS = Access(READ, cookie=True)


async def _reading(request: Request,
                   _: Annotated[Client | None, Depends(READS)]) -> CatalogService:
    """The catalog a read route reads: the latest, the version its path names, or the
    transaction its path names (by prefix, or a namespace under ``sys.dtxns.<id>``)."""
    service: CatalogService = request.app.state.service
    version = request.path_params.get("version")
    if version is None:
        return await _in_transaction(request, service)
    if not version.isdigit():
        raise bad_request(f"no catalog version {version!r}: versions are numbers")
    return await run_in_threadpool(service.at_version, int(version))


async def _writing(request: Request,
                   _: Annotated[Client | None, Depends(WRITES)]) -> CatalogService:
    """The catalog a write route changes: the latest, or the transaction its path names
    (403 on a version's path)."""
    version = request.path_params.get("version")
    if version is not None:
        raise RestError(403, "ForbiddenException",
                        f"catalog version {version} is read-only: {request.method} "
                        f"{request.url.path} is refused; write through the latest "
                        "catalog (a warehouse without @<version>)")
    return await _in_transaction(request, request.app.state.service)


async def _in_transaction(request: Request, service: CatalogService) -> CatalogService:
    """``service``, or inside the transaction the path names: by its prefix
    (``txn-<id>``), or by a namespace ``sys.dtxns.<id>.<ns>``.

    Raises:
        RestError: both at once (400).
        NoSuchTransactionError: no open transaction of that id (404).
    """
    txn_id = request.path_params.get("txn")
    segment = request.path_params.get("namespace")
    found = transactions.inside(levels_of(segment)) if segment is not None else None
    if found is not None and len(found[1]) == 1:
        if txn_id is not None:
            raise bad_request("a name under sys.dtxns is not served inside a transaction's "
                              "prefix: use one or the other")
        return await run_in_threadpool(transactions.in_transaction, service, found[0],
                                       (*transactions.SYSTEM, found[0]))
    if txn_id is None:
        return service
    return await run_in_threadpool(transactions.in_transaction, service, txn_id)


def system(service: CatalogService, levels: Sequence[str]) -> bool:
    """Whether a namespace route on ``levels`` is one of the server's own names (``sys``,
    ``sys.dtxns``, ``sys.dtxns.<id>``), served by :class:`SystemNamespaces`: only at the
    latest catalog's prefix."""
    return (transactions.is_system(levels) and len(levels) <= 3
            and not service.catalog.read_only and service.catalog.transaction_id is None)


Reader = Annotated[CatalogService, Depends(_reading)]
Writer = Annotated[CatalogService, Depends(_writing)]


def _add_ui(app: FastAPI, service: CatalogService, tokens: Tokens | None,
            guard: Guard | None) -> None:
    """The read-only web UI at ``/ui`` (``GET /`` leads there), behind the same tokens as
    the REST routes: a bearer header, or the cookie its sign-in form sets."""

    @app.get("/", include_in_schema=False, dependencies=[Depends(ANYONE_MAY)])
    async def _home() -> Response:
        return RedirectResponse(UI_PATH + "/", status_code=307)

    pages = None
    if tokens is not None and guard is not None:
        pages = SignInPages(partial(guard.sign_in, tokens), partial(_signed_in, tokens),
                            ui_path=UI_PATH)
        app.include_router(pages.routes(), dependencies=[Depends(ANYONE_MAY)])
    ui = create_ui(lambda request: service.catalog.olympia, dependencies=[Depends(UI_READS)],
                   session=pages.session if pages else None)
    ui.state.tokens, ui.state.throttle = tokens, app.state.throttle
    app.mount(UI_PATH, ui)


def _signed_in(tokens: Tokens, token: str) -> str | None:
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
        data = await _read_bounded(request, CREDENTIALS_BODY_BYTES)
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
        peer = _peer(request)
        bucket = client_id if tokens.knows(client_id) else ""
        wait = self.throttle.wait(peer, bucket)
        if wait > 0:
            return await _held(wait)
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
            self.throttle.failed(_peer(request), None)
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


def _add_token_endpoint(app: FastAPI, tokens: Tokens, guard: Guard) -> None:
    """The OAuth2 client-credentials token endpoint."""

    @app.post(TOKEN_PATH, dependencies=[Depends(ANYONE_MAY)])
    async def _token(request: Request) -> Response:  # after _TokenDoor's check

        def refused(status: int, error: str, description: str) -> Response:
            guard.throttle.failed(_peer(request), None)  # every refused form counts
            return _oauth_error(status, error, description)

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
                return _slow_down(issued)
            return _oauth_error(401, "invalid_client", "unknown client id or wrong secret")
        token, lifetime = issued
        return _json({"access_token": token, "token_type": "bearer", "expires_in": lifetime,
                      "issued_token_type": ACCESS_TOKEN_TYPE})


def _slow_down(wait: float) -> Response:
    """The token endpoint's 429 (with ``Retry-After``; the connection is closed, as the
    request's body may not have been read)."""
    seconds = str(math.ceil(wait))
    answer = _oauth_error(429, "slow_down", "too many refused requests from this address or "
                          f"for this client id: retry after {seconds} s")
    answer.headers.update({"Retry-After": seconds, "Connection": "close"})
    return answer


def _oauth_error(status: int, error: str, description: str) -> Response:
    """The OAuth2 error form (RFC 6749 section 5.2) the token endpoint answers with."""
    return Response(json.dumps({"error": error, "error_description": description}),
                    status_code=status, media_type="application/json")


async def _read_bounded(request: Request, limit: int) -> bytes:
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


def levels_of(segment: str) -> list[str]:
    """The levels of the namespace a path segment names."""
    return _decoded(segment).split(NAMESPACE_SEPARATOR)


def _own(levels: list[str]) -> list[str]:
    """``levels`` without a leading ``sys.dtxns.<id>`` when one namespace follows it (the
    route's catalog is then that transaction)."""
    found = transactions.inside(levels)
    return found[1] if found is not None and len(found[1]) == 1 else levels


def namespace_of(segment: str) -> str:
    """The one-level namespace a write's path segment names.

    Raises:
        RestError: the segment is not UTF-8 once decoded, or names several levels (400).
    """
    levels = _own(levels_of(segment))
    name = NAMESPACE_SEPARATOR.join(levels)
    if len(levels) > 1:
        raise bad_request(f"namespace {'.'.join(levels)!r} has {len(levels)} levels; "
                          "Olympia namespaces have one level")
    return name


#: The ErrorModel type of a read of a missing object, by kind.
_NO_SUCH = {"namespace": "NoSuchNamespaceException", "table": "NoSuchTableException",
            "view": "NoSuchViewException"}


def read_namespace_of(segment: str, kind: str = "namespace", name: str = "") -> str:
    """The namespace a read's path segment names (a namespace, or the namespace of a
    ``kind`` object called ``name`` as sent in the path).

    Raises:
        RestError: the segment is not UTF-8 once decoded (400); it names several levels:
            404 of ``kind``'s type, as nothing exists in a multi-level namespace.
    """
    return existing_namespace(NAMESPACE_SEPARATOR.join(_own(levels_of(segment))), kind, name)


def existing_namespace(namespace: str, kind: str = "namespace", name: str = "") -> str:
    """``namespace`` (decoded), if a read of it or of a ``kind`` object in it may find
    something.

    Raises:
        RestError: it names several levels: 404 of ``kind``'s type.
    """
    levels = namespace.split(NAMESPACE_SEPARATOR)
    if len(levels) == 1:
        return namespace
    dotted = ".".join(levels)
    what = (f"namespace {dotted!r}" if kind == "namespace"
            else f"{kind} {dotted}.{name_of(name)}")
    raise RestError(404, _NO_SUCH[kind], f"{what} does not exist: namespace {dotted!r} has "
                    f"{len(levels)} levels, and Olympia namespaces have one level")


def name_of(segment: str) -> str:
    """The table name a path segment names.

    Raises:
        RestError: the segment is not UTF-8 once decoded.
    """
    return _decoded(segment)


def _decoded(segment: str) -> str:
    """A path segment as sent (bytes as latin-1 characters), percent-decoded as UTF-8."""
    try:
        return unquote_to_bytes(segment.encode("latin-1")).decode("utf-8")
    except UnicodeError:
        raise bad_request("a name in the path is not UTF-8 once percent-decoded") from None


def _too_large(limit: int) -> RestError:
    return RestError(413, "BadRequestException",
                     f"the request body is larger than this server accepts ({limit} bytes)")


def _describe(errors: Any) -> str:
    """Validation errors in one line: where, and what is wrong (never the input)."""
    parts = []
    for error in list(errors)[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else
                     str(error.get("msg", "invalid")))
    more = f" (and {len(errors) - 3} more problems)" if len(errors) > 3 else ""
    return "invalid request: " + "; ".join(parts) + more


def _json(value: dict[str, Any]) -> Response:
    return Response(json.dumps(value), media_type="application/json")


def _model(value: IcebergBaseModel) -> Response:
    return Response(value.model_dump_json(), media_type="application/json")
