"""``olympia serve``: an Apache Iceberg REST catalog over an Olympia catalog.

:func:`create_app` builds the ASGI application (:mod:`olympia.server.app`; the catalog routes
in :mod:`olympia.server.routes`, who may call in :mod:`olympia.server.access`, errors as the
specification's ``ErrorModel``) over a :class:`CatalogService` (:mod:`olympia.server.service`:
the operations, on one shared ``OlympiaCatalog`` whose caches serve every request). Needs the
``iceberg`` extra and FastAPI.
"""

from __future__ import annotations

from olympia.server.app import create_app
from olympia.server.service import CatalogService

__all__ = ["CatalogService", "create_app"]
