"""Signing a browser in to and out of the UI where the server needs bearer tokens: a browser
cannot send an ``Authorization`` header, so a form trades credentials for a short-lived access
token kept in an HttpOnly, SameSite=Strict cookie that the server's check accepts like a
bearer token.

Both forms refuse what another site sends: each carries a token tied to the browser (the
sign-in form's to a random nonce in a cookie of its own, the sign-out form's to the access
token's cookie) by an HMAC under a key drawn when the process starts, compared in constant
time; and a browser that says the form came from another origin (``Sec-Fetch-Site``) is
refused before anything is checked. After signing in, the browser goes back to the page it
asked for: a path of the UI on this server only, never another site.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from olympia.ui.app import Session, secure

#: The cookie holding a signed-in browser's access token.
COOKIE = "olympia_ui_token"
#: The cookie holding the nonce the sign-in form's token is tied to.
FORM_COOKIE = "olympia_ui_form"
#: The largest sign-in or sign-out form accepted (their fields are short).
FORM_BYTES = 4096
#: Reads and checks a posted form (fields ``client_id`` and ``secret``, or ``token``):
#: ``(access token, lifetime in seconds)``, or the seconds to wait before trying again (0:
#: the credentials let no one in; more: too many wrong ones came before).
SignIn = Callable[[Request], Awaitable[tuple[str, int] | float]]
#: The client id an access token signs in, ``None`` for any other value of :data:`COOKIE`.
Identify = Callable[[str], str | None]
#: ``Sec-Fetch-Site`` of a form sent from a page of the UI's own origin (or typed in).
_OWN_ORIGIN = frozenset({"same-origin", "none"})
_NONCE = re.compile(r"[A-Za-z0-9_-]{43}")


class _Refused(Exception):
    """A form refused before its fields are looked at."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SignInPages:
    """The sign-in form at ``<ui_path>/login`` and sign-out at ``<ui_path>/logout``, and what
    the UI's pages show of the signed-in browser (:meth:`session`).

    Args:
        sign_in: Reads and checks a posted sign-in form (it slows down wrong credentials).
        identify: The client an access token from ``sign_in`` belongs to.
        ui_path: Where the UI is mounted.
        title: The name shown in the pages' header.
        key: The key the forms' tokens are signed with (default: drawn at random).
    """

    def __init__(self, sign_in: SignIn, identify: Identify, *, ui_path: str = "/ui",
                 title: str = "Olympia catalog", key: bytes | None = None) -> None:
        self._sign_in = sign_in
        self._identify = identify
        self.ui_path = ui_path
        self._key = key or secrets.token_bytes(32)
        self._templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
        self._templates.env.globals.update(title=title)

    def session(self, request: Request) -> Session | None:
        """The browser signed in to ``request`` by its cookie (``None``: not signed in)."""
        token = request.cookies.get(COOKIE, "")
        user = self._identify(token) if token else None
        return None if user is None else Session(user, self._mac("sign-out", token))

    def routes(self) -> APIRouter:
        """The routes, to include in the application that mounts the UI at ``ui_path``
        (before the mount, so that the UI's own checks do not guard them).

        ``GET <ui_path>/login`` shows the form (``?next=`` the UI page to go back to);
        ``POST`` checks it and, when it lets the browser in, sets :data:`COOKIE` for the UI's
        path and redirects to that page (401 and the form again for wrong credentials, 429
        with ``Retry-After`` when ``sign_in`` says to wait, 403 for a form from another site).
        ``POST <ui_path>/logout`` removes the cookie and shows the sign-in form;
        ``GET`` says who is signed in.

        Returns:
            The routes.
        """
        router = APIRouter()
        path = self.ui_path

        @router.get(f"{path}/login", response_class=HTMLResponse)
        def show(request: Request, next: str = "", signed_out: str = "") -> HTMLResponse:
            return self._login_page(request, next=next,
                                    notice="Signed out." if signed_out else "")

        @router.post(f"{path}/login", response_model=None)
        async def submit(request: Request) -> Response:
            try:
                fields = await _form(request)
            except _Refused as exc:
                return self._login_page(request, exc.message, exc.status)
            target = fields.get("next", "")
            nonce = request.cookies.get(FORM_COOKIE, "")
            if _cross_origin(request) or not self._signed("sign-in", nonce,
                                                          fields.get("csrf", "")):
                return self._login_page(
                    request, "This form was not sent from this catalog's own sign-in page "
                    "(or it is too old): sign in again here.", 403, next=target)
            given = await self._sign_in(request)
            if isinstance(given, float):
                if given <= 0:
                    return self._login_page(request, "Those credentials sign no one in.",
                                            401, next=target)
                wait = math.ceil(given)
                refused = self._login_page(request, "Too many wrong credentials: try again "
                                           f"in {wait} seconds.", 429, next=target)
                refused.headers["Retry-After"] = str(wait)
                return refused
            access, lifetime = given
            root = self._root(request)
            answer = RedirectResponse(local_target(target, root) or root + "/",
                                      status_code=303)
            answer.set_cookie(COOKIE, access, max_age=lifetime, path=root, httponly=True,
                              samesite="strict", secure=request.url.scheme == "https")
            answer.delete_cookie(FORM_COOKIE, path=root, httponly=True, samesite="strict",
                                 secure=request.url.scheme == "https")
            return answer

        @router.get(f"{path}/logout", response_class=HTMLResponse)
        def ask(request: Request) -> HTMLResponse:
            return self._page(request, "logout.html", message="")

        @router.post(f"{path}/logout", response_model=None)
        async def sign_out(request: Request) -> Response:
            try:
                fields = await _form(request)
            except _Refused as exc:
                return self._page(request, "logout.html", exc.status, message=exc.message)
            session = self.session(request)
            if _cross_origin(request) or (session is not None and not hmac.compare_digest(
                    session.sign_out.encode(), fields.get("csrf", "").encode())):
                return self._page(request, "logout.html", 403, message=(
                    "This form was not sent from a page of this catalog: use the Sign out "
                    "button in the header."))
            root = self._root(request)
            answer = RedirectResponse(f"{root}/login?signed_out=1", status_code=303)
            answer.delete_cookie(COOKIE, path=root, httponly=True, samesite="strict",
                                 secure=request.url.scheme == "https")
            return answer

        return router

    def _root(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")) + self.ui_path

    def _mac(self, purpose: str, value: str) -> str:
        mac = hmac.new(self._key, f"{purpose}\0{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def _signed(self, purpose: str, value: str, given: str) -> bool:
        """Whether ``given`` is the token of ``value`` for ``purpose`` (constant time)."""
        return bool(value) and hmac.compare_digest(self._mac(purpose, value).encode(),
                                                   given.encode())

    def _page(self, request: Request, template: str, code: int = 200,
              **values: object) -> HTMLResponse:
        answer = self._templates.TemplateResponse(
            request, template, {"root": self._root(request), "ctx": None, "keep_query": [],
                                "session": self.session(request), "place": None, **values},
            status_code=code)
        secure(answer.headers)  # served by the application mounting the UI, not by the UI
        return answer

    def _login_page(self, request: Request, message: str = "", code: int = 200, *,
                    next: str = "", notice: str = "") -> HTMLResponse:
        """The sign-in form, its token tied to the browser's nonce (drawn when it has
        none)."""
        nonce = request.cookies.get(FORM_COOKIE, "")
        fresh = not _NONCE.fullmatch(nonce)
        if fresh:
            nonce = secrets.token_urlsafe(32)
        answer = self._page(request, "login.html", code, message=message, notice=notice,
                            csrf=self._mac("sign-in", nonce),
                            next=local_target(next, self._root(request)) or "")
        if fresh:
            answer.set_cookie(FORM_COOKIE, nonce, path=self._root(request), httponly=True,
                              samesite="strict", secure=request.url.scheme == "https")
        return answer


def local_target(target: str, ui_root: str) -> str | None:
    """``target`` when it is a page of the UI on this server: a path (and query) at
    ``ui_root`` or below, printable, without backslashes or ``.``/``..`` segments;
    ``None`` for anything else (another site, ``//host``, ``/\\host``, ``https:...``).

    Args:
        target: Where a form asks to go (``next``).
        ui_root: The path the UI is mounted at, as the browser sees it.

    Returns:
        ``target``, or ``None``.
    """
    if not target or not target.isprintable() or "\\" in target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not (parts.path == ui_root
                                             or parts.path.startswith(ui_root + "/")):
        return None
    if any(segment in (".", "..") for segment in unquote(parts.path).split("/")):
        return None
    return target if target.startswith("/") and not target.startswith("//") else None


def _cross_origin(request: Request) -> bool:
    """Whether the browser says the request comes from a page of another origin."""
    site = request.headers.get("sec-fetch-site")
    return site is not None and site not in _OWN_ORIGIN


async def _form(request: Request) -> dict[str, str]:
    """The posted form's text fields (the body is kept: ``sign_in`` reads it again).

    Raises:
        _Refused: no ``Content-Length`` (411), or one over :data:`FORM_BYTES` (413).
    """
    declared = request.headers.get("content-length", "")
    if not declared.isdigit():
        raise _Refused(411, "the form must be sent with a Content-Length")
    if int(declared) > FORM_BYTES:
        raise _Refused(413, f"the form is over {FORM_BYTES} bytes")
    await request.body()  # no more than the declared length: the HTTP server stops there
    form = await request.form()
    return {name: value for name, value in form.items() if isinstance(value, str)}
