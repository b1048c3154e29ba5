"""The UI application: pages rendered from Jinja2 templates shipped in this package."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fastapi import FastAPI, Request, params
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.staticfiles import StaticFiles

from olympia.catalog.catalog import Catalog

HERE = Path(__file__).parent


def create_ui(open_catalog: Callable[[Request], Catalog], *,
              dependencies: Sequence[params.Depends] = (),
              title: str = "Olympia catalog") -> FastAPI:
    """The read-only catalog UI as an ASGI app to mount (``app.mount("/ui", ...)``).

    Every link it renders is relative to where it is mounted.

    Args:
        open_catalog: The catalog to show for a request; an exception it raises is
            answered as an error page (404 for a missing object, 403 when refused).
        dependencies: Run before every page (authentication).
        title: The name shown in every page's header.

    Returns:
        The application.
    """
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=list(dependencies))
    templates = Jinja2Templates(directory=HERE / "templates")
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.get("/", response_class=HTMLResponse, name="home")
    def home(request: Request) -> HTMLResponse:
        catalog = open_catalog(request)
        return templates.TemplateResponse(request, "home.html", {
            "title": title, "namespaces": catalog.list_namespaces()})

    return app
