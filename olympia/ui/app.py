"""The UI application: server-rendered pages from Jinja2 templates shipped in this package
(autoescaped: every name, comment and SQL text is shown as text), links built from the path
the app is mounted at, every error answered as a page naming what went wrong, and every
answer with headers that keep its pages to their own style sheet, without scripts, and out
of other sites' frames (:data:`SECURITY_HEADERS`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, Query, Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.reader import Snapshot
from olympia.exceptions import InvalidArgumentError, InvalidNameError, NotFoundError, OlympiaError
from olympia.plan.render import SIGNS
from olympia.spec import fields as described
from olympia.ui import pages
from olympia.ui.timeline import timeline
from olympia.versions.dtxn import summarize_transactions
from olympia.versions.timetravel import format_millis, resolve

HERE = Path(__file__).parent
log = logging.getLogger(__name__)
#: Query parameters that pick a version or a page: not kept by the version form.
_PINNING = frozenset({"version", "as_of", "export", "after", "before"})
FromVersion = Annotated[int | None, Query(alias="from")]
ObjectKind = Annotated[str | None, Query(alias="object")]
#: The headers every UI answer carries. Pages load only the UI's own style sheet (and style
#: attributes, which indent nested columns), run no script, send forms only to their own
#: origin, and may be framed by pages of their own origin only (Airflow frames its plugins'
#: pages from the same server); ``X-Frame-Options`` says the same to older browsers.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; "
                               "style-src-attr 'unsafe-inline'; img-src 'self'; "
                               "form-action 'self'; base-uri 'none'; frame-ancestors 'self'",
    "X-Frame-Options": "SAMEORIGIN",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` to every answer (a header the
    answer sets already is kept)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                secure(MutableHeaders(scope=message))
            await send(message)

        await self.app(scope, receive, secured)


def secure(headers: MutableHeaders) -> None:
    """Add :data:`SECURITY_HEADERS` to an answer's ``headers`` (keeping any it has)."""
    for name, value in SECURITY_HEADERS.items():
        headers.setdefault(name, value)


@dataclass(frozen=True)
class Session:
    """A browser signed in to the UI, as every page's header shows it.

    Args:
        user: Who signed in (a client id).
        sign_out: The token the sign-out form sends (tied to the browser's session).
    """

    user: str
    sign_out: str


@dataclass(frozen=True)
class Place:
    """Which catalog the pages show, when the UI serves several (one per Airflow connection).

    Args:
        name: The catalog's name (a connection id).
        back: Where the catalogs are listed.
    """

    name: str
    back: str


@dataclass
class _Pin:
    """The version a page is asked for: ``?version=``, ``?as_of=`` or ``?export=`` (at most
    one; an empty form field is none)."""

    version: str | None = None
    as_of: str | None = None
    export: str | None = None


Pin = Annotated[_Pin, Depends()]
#: Pages that always show the latest catalog (a diff names its own versions).
_UNPINNED = frozenset({"/diff", "/transactions"})


class _Context:
    """What one request renders from: the catalog, the version asked for and link helpers."""

    def __init__(self, request: Request, catalog: Catalog, pin: _Pin) -> None:
        self.request = request
        self.catalog = catalog
        number = _version_number(pin.version)
        as_of, export = _given(pin.as_of), _given(pin.export)
        self.snapshot: Snapshot = resolve(catalog, version=number, as_of=as_of, export=export)
        self.latest = catalog.version
        self.pinned = number is not None or as_of is not None or export is not None
        self.export = export

    def link(self, path: str, **query: Any) -> str:
        """``path`` under the app's mount point, keeping the version shown (``?version=``)
        on every page but those of :data:`_UNPINNED`."""
        if self.pinned and "version" not in query and path not in _UNPINNED:
            query["version"] = self.snapshot.version
        kept = {k: v for k, v in query.items() if v is not None}
        root = self.request.scope.get("root_path", "")
        return f"{root}{path}" + (f"?{urlencode(kept)}" if kept else "")


def create_ui(open_catalog: Callable[[Request], Catalog], *,
              dependencies: Sequence[params.Depends] = (),
              title: str = "Olympia catalog",
              session: Callable[[Request], Session | None] | None = None,
              place: Callable[[Request], Place] | None = None) -> FastAPI:
    """The read-only catalog UI as an ASGI app to mount (``app.mount("/ui", ...)``).

    Every link it renders is under the path it is mounted at; every page but Diff and
    Transactions takes ``?version=N``, ``?as_of=<ISO-8601>`` or ``?export=<name>`` and shows
    the catalog as it was then (those two refuse them).

    Args:
        open_catalog: The catalog to show for a request. An exception it raises is answered
            as an error page: an ``HTTPException`` with its status, a ``NotFoundError`` 404,
            a ``PermissionError`` 403.
        dependencies: Run before every page (authentication).
        title: The name shown in every page's header.
        session: The browser signed in to the request, shown in the header with a sign-out
            button (``None``: no sign-in, or not signed in).
        place: Which catalog the request shows, named in the header with a link to the
            others (several catalogs behind one server).

    Returns:
        The application.
    """
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=list(dependencies))
    app.add_middleware(SecurityHeaders)
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals.update(title=title, signs=SIGNS, format_millis=format_millis,
                                 facts=described.facts)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def render(request: Request, template: str, code: int = 200, **values: Any,
               ) -> HTMLResponse:
        keep = [(k, v) for k, v in request.query_params.multi_items() if k not in _PINNING]
        latest = request.url.path + (f"?{urlencode(keep)}" if keep else "")
        return templates.TemplateResponse(
            request, template, {"root": request.scope.get("root_path", ""), "ctx": None,
                                "keep_query": keep, "latest_link": latest,
                                "session": session(request) if session else None,
                                "place": place(request) if place else None, **values},
            status_code=code)

    def context(request: Request, pin: _Pin, pinnable: bool = True) -> _Context:
        if not pinnable and any(map(_given, (pin.version, pin.as_of, pin.export))):
            raise InvalidArgumentError(f"{request.url.path} shows the latest catalog: it "
                                       "takes no version, as_of or export")
        return _Context(request, open_catalog(request), pin)

    def error_page(request: Request, status: int, message: str) -> HTMLResponse:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return render(request, "error.html", status, status=status, message=message,
                      sign_in=f"/login?next={quote(here, safe='/')}")

    @app.exception_handler(NotFoundError)
    async def _missing(request: Request, exc: NotFoundError) -> Response:
        return error_page(request, 404, _message(exc))

    @app.exception_handler(InvalidArgumentError)
    async def _invalid(request: Request, exc: InvalidArgumentError) -> Response:
        return error_page(request, 400, _message(exc))

    @app.exception_handler(InvalidNameError)  # before OlympiaError, which its MRO lists first
    @app.exception_handler(ValueError)  # a name the catalog's format cannot hold, ...
    async def _bad_value(request: Request, exc: ValueError) -> Response:
        return error_page(request, 400, _message(exc))

    @app.exception_handler(PermissionError)
    async def _refused(request: Request, exc: PermissionError) -> Response:
        return error_page(request, 403, _message(exc))

    @app.exception_handler(RequestValidationError)
    async def _bad_query(request: Request, exc: RequestValidationError) -> Response:
        wrong = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
                          for e in exc.errors())
        return error_page(request, 400, f"bad query: {wrong}")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        message = (f"no page {request.url.path}" if exc.status_code == 404
                   else str(exc.detail))
        answer = error_page(request, exc.status_code, message)
        answer.headers.update(exc.headers or {})
        return answer

    @app.exception_handler(OlympiaError)
    async def _failed(request: Request, exc: OlympiaError) -> Response:
        log.warning("UI page %s failed: %s", request.url.path, exc)
        return error_page(request, 500, _message(exc))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("UI page %s failed", request.url.path)
        answer = error_page(request, 500, "internal error; the server log has the details")
        secure(answer.headers)  # answered outside the middleware (by Starlette's outermost)
        return answer

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request, pin: Pin, after: str | None = None,
             limit: int | None = None) -> HTMLResponse:
        ctx = context(request, pin)
        listing = pages.namespaces_page(ctx.snapshot, after, pages.page_size(limit))
        return render(request, "home.html", ctx=ctx, listing=listing, limit=limit)

    def gone(request: Request, ctx: _Context, exc: NotFoundError, ref: ObjectRef, path: str,
             **query: str) -> HTMLResponse:
        """The 404 of an object not in the version shown, with the last version before it
        that had the object (looked for among :data:`pages.LOOK_BACK` versions)."""
        last = pages.last_version_with(ctx.catalog, ctx.snapshot.version, ref)
        return render(request, "error.html", 404, ctx=ctx, status=404, message=_message(exc),
                      last=last, last_link=None if last is None else
                      ctx.link(path, **query, version=last.version),
                      look_back=pages.LOOK_BACK)

    def last_change(ctx: _Context, kind: ObjectType, *name: str) -> dict[str, Any]:
        """What an object's page says of its last change: the version that made it (with
        its ``user``), or where to search older versions, and the object's history."""
        ref = ObjectRef(kind, *name)
        page = pages.last_change(ctx.catalog, ctx.snapshot.version, ref)
        query = {"object": kind.label, "ns": ref.namespace, "name": ref.name or None}
        return {"page": page, "entry": page.entries[0] if page.entries else None,
                "history": ctx.link("/history", **query),
                "older": None if page.next_before is None else
                ctx.link("/history", **query, before=page.next_before)}

    @app.get("/namespace", response_class=HTMLResponse)
    def namespace(request: Request, name: str, pin: Pin, after: str | None = None,
                  limit: int | None = None, q: str | None = None) -> HTMLResponse:
        ctx = context(request, pin)
        try:
            found = ctx.snapshot.load_namespace(name)
        except NotFoundError as exc:
            return gone(request, ctx, exc, ObjectRef(ObjectType.NAMESPACE, name), "/namespace",
                        name=name)
        prefix = pages.check_prefix(q)
        listing = pages.contents_page(ctx.snapshot, name, after, pages.page_size(limit),
                                      prefix)
        return render(request, "namespace.html", ctx=ctx, listing=listing, ns=found,
                      limit=limit, prefix=prefix,
                      changed=last_change(ctx, ObjectType.NAMESPACE, name))

    @app.get("/find", response_class=HTMLResponse)
    def find(request: Request, pin: Pin, q: str | None = None, after: str | None = None,
             limit: int | None = None) -> HTMLResponse:
        ctx = context(request, pin)
        prefix = pages.check_prefix(q)
        found = None if prefix is None else pages.find(ctx.snapshot, prefix, _given(after),
                                                       pages.page_size(limit))
        return render(request, "find.html", ctx=ctx, found=found, prefix=prefix, limit=limit)

    @app.get("/table", response_class=HTMLResponse)
    def table(request: Request, ns: str, name: str, pin: Pin) -> HTMLResponse:
        ctx = context(request, pin)
        try:
            found = ctx.snapshot.load_table(ns, name)
        except NotFoundError as exc:
            return gone(request, ctx, exc, ObjectRef(ObjectType.TABLE, ns, name), "/table",
                        ns=ns, name=name)
        iceberg = pages.iceberg_details(ctx.catalog, found, ctx.snapshot.version)
        return render(request, "table.html", ctx=ctx, table=found,
                      columns=pages.column_rows(found.columns),
                      changed=last_change(ctx, ObjectType.TABLE, ns, name), iceberg=iceberg,
                      owner=pages.owner_of(ctx.snapshot, found, iceberg),
                      used=pages.used_by(ctx.snapshot, ObjectRef(ObjectType.TABLE, ns, name),
                                         None, pages.USED_BY_READS),
                      format_properties={k: v for k, v in found.format_properties.items()
                                         if iceberg is None or k not in pages.SHOWN_IN_OVERVIEW},
                      recent=pages.RECENT_SNAPSHOTS)

    @app.get("/used-by", response_class=HTMLResponse)
    def used_by(request: Request, ns: str, name: str, pin: Pin,
                after: str | None = None) -> HTMLResponse:
        ctx = context(request, pin)
        ref = ObjectRef(ObjectType.TABLE, ns, name)
        ctx.snapshot.codec.key(ref)  # refuses a name the format cannot hold
        return render(request, "used_by.html", ctx=ctx, ref=ref,
                      found=pages.used_by(ctx.snapshot, ref, _given(after),
                                          pages.USED_BY_READS),
                      reads=pages.USED_BY_READS,
                      exists=ctx.snapshot.table_exists(ns, name))

    @app.get("/view", response_class=HTMLResponse)
    def view(request: Request, ns: str, name: str, pin: Pin) -> HTMLResponse:
        ctx = context(request, pin)
        try:
            found = ctx.snapshot.load_view(ns, name)
        except NotFoundError as exc:
            return gone(request, ctx, exc, ObjectRef(ObjectType.VIEW, ns, name), "/view", ns=ns,
                        name=name)
        references = [(a, b, ctx.snapshot.table_exists(a, b), ctx.snapshot.view_exists(a, b))
                      for a, b in found.referenced_objects]
        return render(request, "view.html", ctx=ctx, view=found,
                      columns=pages.column_rows(found.columns), references=references,
                      changed=last_change(ctx, ObjectType.VIEW, ns, name))

    @app.get("/history", response_class=HTMLResponse)
    def history(request: Request, pin: Pin, before: int | None = None,
                limit: int | None = None, kind: ObjectKind = None,
                ns: str | None = None, name: str | None = None,
                user: str | None = None) -> HTMLResponse:
        ctx = context(request, pin)
        if before is None and ctx.pinned:  # the history as it was: that version and older
            before = ctx.snapshot.version + 1
        ref = None if not _given(kind) else pages.object_of(
            ctx.snapshot, str(kind).strip(), ns, name)
        page = pages.history_page(ctx.catalog, before, pages.page_size(limit), ref,
                                  _given(user))
        query = {"object": kind if ref else None, "ns": ns if ref else None,
                 "name": name if ref else None, "user": page.user, "limit": limit}
        newer = None  # a filtered page has no cheap newer page: it links the latest
        if not page.filtered and page.top < page.latest:
            up = page.top + pages.page_size(limit) + 1
            newer = ctx.link("/history", **query, before=up if up <= page.latest else None,
                             version=None)
        return render(request, "history.html", ctx=ctx, page=page, chart=timeline(page),
                      entries=[(e, e.to_dict()) for e in page.entries],
                      is_export=pages.is_export, limit=limit, query=query, newer=newer,
                      latest=ctx.link("/history", **query, version=None),
                      max_actions=pages.ACTIONS_SHOWN, reads=pages.SEARCH_READS)

    @app.get("/transactions", response_class=HTMLResponse)
    def transactions(request: Request, pin: Pin) -> HTMLResponse:
        ctx = context(request, pin, pinnable=False)
        return render(request, "transactions.html", ctx=ctx,
                      transactions=summarize_transactions(ctx.catalog))

    @app.get("/diff", response_class=HTMLResponse)
    def diff(request: Request, to: int, pin: Pin, from_: FromVersion = None,
             ns: str | None = None, after: str | None = None,
             limit: int | None = None) -> HTMLResponse:
        ctx = context(request, pin, pinnable=False)
        older = to - 1 if from_ is None else from_
        size = pages.DIFF_PAGE if limit is None else pages.page_size(limit)
        page = pages.diff_page(ctx.catalog, older, to, _given(ns), _given(after), size)
        return render(request, "diff.html", ctx=ctx, page=page, older=older, newer=to,
                      limit=limit)

    return app


def _version_number(text: str | None) -> int | None:
    """``?version=`` as a number (``None`` when absent or empty, as a blank form sends it).

    Raises:
        InvalidArgumentError: not a version number.
    """
    if text is None or not text.strip():
        return None
    if not text.strip().isdigit():
        raise InvalidArgumentError(f"version must be a version number, got {text!r}")
    return int(text)


def _given(text: str | None) -> str | None:
    """A query parameter's value, ``None`` when absent or blank (an empty form field)."""
    return text.strip() if text and text.strip() else None


def _message(exc: BaseException) -> str:
    """An error's message without the quotes ``KeyError`` adds."""
    return str(exc.args[0]) if exc.args else type(exc).__name__
