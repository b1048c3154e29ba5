"""The Olympia catalog UI inside Airflow: the read-only pages of :mod:`olympia.ui` on the
API server under ``/olympia/ui/<conn_id>/``, with a landing page listing the ``olympia``
connections the user may read, and a navigation entry to it.

Every page needs an Airflow login and read access to connections (the ``/olympia/ui/``
landing page) or to that connection (its catalog's pages), checked by the API server's own
auth manager. No field of a connection but its id and description is rendered.
Registered through the ``airflow.plugins`` entry point (Airflow loads the plugins named in
provider info only with ``[core] lazy_discover_providers`` off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk.plugins_manager import AirflowPlugin

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import Receive, Scope, Send

URL_PREFIX = "/olympia/ui"
TITLE = "Olympia catalog"


class LazyApp:
    """An ASGI app built on its first request: processes that load plugins but serve no
    HTTP (scheduler, workers, triggerer) never import the UI."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            from olympia_provider.plugins.app import create_app

            self.app = create_app()
        await self.app(scope, receive, send)


class OlympiaCatalogUIPlugin(AirflowPlugin):
    """The Olympia catalog UI on the API server and its entry in Airflow's navigation."""

    name = "olympia_catalog_ui"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": TITLE}]
    external_views = [{"name": TITLE, "href": f"{URL_PREFIX}/", "destination": "nav",
                       "category": "browse", "url_route": "olympia-catalog"}]
