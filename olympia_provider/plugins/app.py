"""The application the catalog UI plugin mounts (imported on the API server's first request
to it): the landing page and one :mod:`olympia.ui` app per ``olympia`` connection."""

from __future__ import annotations

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import (
    ReadableConnectionsFilterDep,
    requires_access_connection,
    resolve_user_from_token,
)
from airflow.models.connection import Connection
from airflow.sdk.exceptions import AirflowNotFoundException
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse
from jinja2 import Environment
from sqlalchemy import select

from olympia.catalog.catalog import Catalog
from olympia.ui import create_ui
from olympia.ui.app import Place, SecurityHeaders
from olympia_provider.hooks.olympia import OlympiaHook, settings_from_connection
from olympia_provider.plugins.catalog_ui import TITLE

LANDING_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title></head>
<body><main>
<h1>{{ title }}</h1>
{% if connections %}
<p>Catalogs of the <code>olympia</code> connections you may read:</p>
<ul id="connections">
{% for conn in connections %}
  <li><a href="{{ root }}/{{ conn.conn_id | urlencode }}/">{{ conn.conn_id }}</a>
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


def connection_place(request: Request) -> Place:
    """The connection a catalog page shows, with a link back to the landing page."""
    root = str(request.scope.get("root_path", ""))  # <landing page>/<connection id>
    return Place(request.path_params.get("connection_id", ""), root.rsplit("/", 1)[0] + "/")


async def login_first(request: Request) -> None:
    """Send a browser without a valid session to Airflow's login page, to come back here.

    Raises:
        HTTPException: 303 to the login page for a request of HTML with no token or an
            expired or invalid session cookie; other requests go on to the API server's
            authentication (401 without a token).
    """
    if "authorization" in request.headers or "text/html" not in request.headers.get(
            "accept", ""):
        return
    cookie = request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    # Airflow's middleware resolves the user of a valid cookie (and clears one it cannot use)
    if cookie and getattr(request.state, "user", None) is None:
        try:
            await resolve_user_from_token(cookie)
        except HTTPException:
            cookie = None
    if not cookie:
        raise HTTPException(status.HTTP_303_SEE_OTHER, "Not authenticated", headers={
            "Location": get_auth_manager().get_url_login(next_url=str(request.url))})


def create_app() -> FastAPI:
    """The plugin's application: the landing page and one catalog UI per connection.

    Returns:
        The application the API server mounts at ``/olympia/ui``.
    """
    guard = [Depends(login_first), Depends(requires_access_connection("GET"))]
    app = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.auth_manager = get_auth_manager()  # for the API server's dependencies
    app.add_middleware(SecurityHeaders)  # the landing page's answers too
    landing = Environment(autoescape=True).from_string(LANDING_PAGE)

    @app.get("/", response_class=HTMLResponse, dependencies=guard)
    def connections(request: Request, readable: ReadableConnectionsFilterDep,
                    session: SessionDep) -> str:
        query = readable.to_orm(select(Connection.conn_id, Connection.description)
                                .where(Connection.conn_type == OlympiaHook.conn_type)
                                .order_by(Connection.conn_id))
        return landing.render(title=TITLE, root=request.scope.get("root_path", ""),
                              connections=session.execute(query).all())

    app.mount("/{connection_id}", create_ui(open_catalog, dependencies=guard, title=TITLE,
                                            place=connection_place))
    return app
