"""Signing a browser in to the UI where the server needs bearer tokens: a browser cannot send
an ``Authorization`` header, so a form trades credentials for a short-lived access token kept
in an HttpOnly, SameSite=Strict cookie that the server's check accepts like a bearer token."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from olympia.ui.app import secure

#: The cookie holding a signed-in browser's access token.
COOKIE = "olympia_ui_token"
#: Reads and checks a posted form (fields ``client_id`` and ``secret``, or ``token``):
#: ``(access token, lifetime in seconds)``, or the seconds to wait before trying again (0:
#: the credentials let no one in; more: too many wrong ones came before).
SignIn = Callable[[Request], Awaitable[tuple[str, int] | float]]


def login_routes(sign_in: SignIn, *, ui_path: str = "/ui",
                 title: str = "Olympia catalog") -> APIRouter:
    """The sign-in form at ``<ui_path>/login``, to include in the application that mounts the
    UI at ``ui_path`` (before the mount, so that the UI's own checks do not guard it).

    ``GET`` shows the form; ``POST`` checks it with ``sign_in`` and, when it lets the
    browser in, sets :data:`COOKIE` for the UI's path and redirects to the UI (401 and the
    form again otherwise; 429 with ``Retry-After`` when ``sign_in`` says to wait).

    Args:
        sign_in: Reads and checks the posted form.
        ui_path: Where the UI is mounted.
        title: The name shown in the page's header.

    Returns:
        The routes.
    """
    router = APIRouter()
    templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
    templates.env.globals.update(title=title)

    def ui_root(request: Request) -> str:
        return str(request.scope.get("root_path", "")) + ui_path

    def form(request: Request, message: str = "", code: int = 200) -> HTMLResponse:
        answer = templates.TemplateResponse(
            request, "login.html", {"root": ui_root(request), "ctx": None, "keep_query": [],
                                    "message": message}, status_code=code)
        secure(answer.headers)  # served by the application mounting the UI, not by the UI
        return answer

    @router.get(f"{ui_path}/login", response_class=HTMLResponse)
    def show(request: Request) -> HTMLResponse:
        return form(request)

    @router.post(f"{ui_path}/login", response_model=None)
    async def submit(request: Request) -> Response:
        given = await sign_in(request)
        if isinstance(given, float):
            if given <= 0:
                return form(request, "Those credentials sign no one in.", 401)
            wait = math.ceil(given)
            refused = form(request, "Too many wrong credentials: try again in "
                           f"{wait} seconds.", 429)
            refused.headers["Retry-After"] = str(wait)
            return refused
        access, lifetime = given
        answer = RedirectResponse(ui_root(request) + "/", status_code=303)
        answer.set_cookie(COOKIE, access, max_age=lifetime, path=ui_root(request),
                          httponly=True, samesite="strict",
                          secure=request.url.scheme == "https")
        return answer

    return router
