"""The Olympia catalog UI inside Airflow: the read-only pages of :mod:`olympia.ui` on the
API server under ``/olympia/ui/<conn_id>/``, with a landing page listing the ``olympia``
connections the user may read, and a navigation entry to it.

Every page needs an Airflow login and read access to connections (the ``/olympia/ui/``
landing page) or to that connection (its catalog's pages), checked by the API server's own
auth manager. No field of a connection but its id and description is rendered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk.plugins_manager import AirflowPlugin

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from starlette.types import Receive, Scope, Send

    from olympia.catalog.catalog import Catalog

URL_PREFIX = "/olympia/ui"
TITLE = "Olympia catalog"

LANDING_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title></head>
<body><main>
<h1>{{ title }}</h1>
{% if connections %}
<p>Catalogs of the <code>olympia</code> connections you may read:</p>
<ul id="connections">
{% for conn in connections %}
  <li><a href="{{ conn.conn_id | urlencode }}/">{{ conn.conn_id }}</a>
  {%- if conn.description %} — {{ conn.description }}{% endif %}</li>
{% endfor %}
</ul>
{% else %}
<p>No <code>olympia</code> connection you may read. Add one of type <code>olympia</code> in
Admin → Connections.</p>
{% endif %}
</main></body></html>
"""


def open_catalog(request: Request) -> Catalog:
    """The catalog of the ``olympia`` connection named in the request's path.

    Raises:
        HTTPException: 404 when there is no such ``olympia`` connection, 409 when the
            connection names no usable catalog.
    """
    from airflow.sdk.exceptions import AirflowNotFoundException
    from fastapi import HTTPException, status

    from olympia.catalog.catalog import Catalog
    from olympia_provider.hooks.olympia import OlympiaHook, settings_from_connection

    conn_id = request.path_params["connection_id"]
    try:
        conn = OlympiaHook.get_connection(conn_id)
    except AirflowNotFoundException:
        conn = None
    if conn is None or conn.conn_type != OlympiaHook.conn_type:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"no connection {conn_id!r} of type {OlympiaHook.conn_type!r}")
    try:
        uri, options = settings_from_connection(conn)
    except ValueError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return Catalog.open(uri, options)


async def login_first(request: Request) -> None:
    """Send a browser that brings no credential to Airflow's login page, to come back here.

    Raises:
        HTTPException: 303 to the login page for a request of HTML without a token; other
            requests go on to the API server's authentication (401 without a token).
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from fastapi import HTTPException, status

    if ("authorization" in request.headers or COOKIE_NAME_JWT_TOKEN in request.cookies
            or "text/html" not in request.headers.get("accept", "")):
        return
    raise HTTPException(status.HTTP_303_SEE_OTHER, "Not authenticated", headers={
        "Location": get_auth_manager().get_url_login(next_url=str(request.url))})


def create_app() -> FastAPI:
    """The plugin's application: the landing page and one catalog UI per connection.

    Returns:
        The application the API server mounts at :data:`URL_PREFIX`.
    """
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import (
        ReadableConnectionsFilterDep,
        requires_access_connection,
    )
    from airflow.models.connection import Connection
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse
    from jinja2 import Environment
    from sqlalchemy import select

    from olympia.ui import create_ui
    from olympia_provider.hooks.olympia import OlympiaHook

    guard = [Depends(login_first), Depends(requires_access_connection("GET"))]
    app = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)
    landing = Environment(autoescape=True).from_string(LANDING_PAGE)

    @app.get("/", response_class=HTMLResponse, dependencies=guard)
    def connections(readable: ReadableConnectionsFilterDep, session: SessionDep) -> str:
        query = readable.to_orm(select(Connection.conn_id, Connection.description)
                                .where(Connection.conn_type == OlympiaHook.conn_type)
                                .order_by(Connection.conn_id))
        return landing.render(title=TITLE, connections=session.execute(query).all())

    app.mount("/{connection_id}", create_ui(open_catalog, dependencies=guard, title=TITLE))
    return app


class LazyApp:
    """An ASGI app built on its first request: processes that load plugins but serve no
    HTTP (scheduler, workers, triggerer) never import the UI."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            self.app = create_app()
        await self.app(scope, receive, send)


class OlympiaCatalogUIPlugin(AirflowPlugin):
    """The Olympia catalog UI on the API server and its entry in Airflow's navigation."""

    name = "olympia_catalog_ui"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": TITLE}]
    external_views = [{"name": TITLE, "href": f"{URL_PREFIX}/", "destination": "nav",
                       "category": "browse", "url_route": "olympia-catalog"}]
