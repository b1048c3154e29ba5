"""The REST catalog application: the catalog routes (:mod:`olympia.server.routes`) at the
latest catalog, at each version and inside each distributed transaction, ``GET /v1/config``,
the token endpoint and the UI behind the same access rules (:mod:`olympia.server.access`),
and every error answered as an ``ErrorModel``."""

from __future__ import annotations

from functools import partial

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from olympia.server.access import (
    ANYONE_MAY,
    READS,
    TOKEN_PATH,
    UI_READS,
    Guard,
    add_token_endpoint,
    held,
    signed_in,
    slow_down,
)
from olympia.server.auth import Throttle, Tokens
from olympia.server.errors import EXPECTED, error_response, response_for
from olympia.server.routes import ENDPOINTS, MAX_BODY_BYTES, describe, json_answer, router
from olympia.server.service import TXN_PREFIX, VERSION_PREFIX, CatalogService
from olympia.ui import create_ui
from olympia.ui.login import SignInPages


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
    application sees it (held first, as every such answer is:
    :func:`~olympia.server.access.held`): a client refused again and again costs the event
    loop no routing, and its body is not read."""

    def __init__(self, app: ASGIApp, throttle: Throttle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == TOKEN_PATH):
            wait = self.throttle.wait(scope["client"][0] if scope.get("client") else "", None)
            if wait > 0:
                await slow_down(await held(wait))(scope, receive, send)
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
    app.state.max_body_bytes = max_body_bytes
    app.state.throttle = throttle = throttle or Throttle()
    guard = Guard(throttle) if tokens is not None else None
    if tokens is not None and guard is not None:
        add_token_endpoint(app, tokens, guard)

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
        return error_response(400, "BadRequestException", describe(exc.errors()),
                              head=request.method == "HEAD")

    @app.get("/v1/config", dependencies=[Depends(READS)])
    async def get_config(warehouse: str | None = None) -> Response:
        return json_answer(service.config(warehouse, ENDPOINTS))


    for prefix in ("", VERSION_PREFIX.format("{version}"), TXN_PREFIX.format("{txn}")):
        app.include_router(router, prefix="/v1" + (f"/{prefix}" if prefix else ""))
    _add_ui(app, service, tokens, guard)
    return _RawPath(app if tokens is None else _TokenDoor(app, throttle))


UI_PATH = "/ui"

def _add_ui(app: FastAPI, service: CatalogService, tokens: Tokens | None,
            guard: Guard | None) -> None:
    """The read-only web UI at ``/ui`` (``GET /`` leads there), behind the same tokens as
    the REST routes: a bearer header, or the cookie its sign-in form sets."""

    @app.get("/", include_in_schema=False, dependencies=[Depends(ANYONE_MAY)])
    async def _home() -> Response:
        return RedirectResponse(UI_PATH + "/", status_code=307)

    pages = None
    if tokens is not None and guard is not None:
        pages = SignInPages(partial(guard.sign_in, tokens), partial(signed_in, tokens),
                            ui_path=UI_PATH)
        app.include_router(pages.routes(), dependencies=[Depends(ANYONE_MAY)])
    ui = create_ui(lambda request: service.catalog.olympia, dependencies=[Depends(UI_READS)],
                   session=pages.session if pages else None)
    ui.state.tokens, ui.state.throttle = tokens, app.state.throttle
    app.mount(UI_PATH, ui)

