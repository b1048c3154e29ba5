"""Airflow Assets of an Olympia catalog and of its objects, named after the catalog itself.

A catalog at ``s3://bucket/lake`` is the Asset ``olympia://s3/bucket/lake``; its table
``sales.orders`` is ``olympia://s3/bucket/lake?object=sales.orders``. Local catalogs are
``olympia://file/<absolute path>``. The provider registers the ``olympia`` scheme with
:func:`normalize_asset_uri`, so every spelling of one catalog (``s3a://``, a trailing or
doubled slash, a relative path, ``file://``) gives one Asset, whichever connection reaches it.
Storage names come from the scheme table (:mod:`olympia.storage.schemes`): ``gs://b/p`` is
``olympia://gs/b/p``, ``abfs://container/p`` ``olympia://abfs/container/p``. This module
imports nothing heavy: DAG files and the API server load it.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from airflow.sdk import Asset, AssetAlias

from olympia.storage.schemes import SCHEMES, TABLE, supported

SCHEME = "olympia"
# storage scheme -> the name the asset URI uses (the scheme table's)
_STORAGES = {alias: scheme.name for alias, scheme in SCHEMES.items()}


def _location(storage: str, path: str) -> str:
    """``<storage>/<path>`` with the path's dots and doubled or trailing slashes removed."""
    path = posixpath.normpath("/" + path.strip("/")).lstrip("/")
    return f"{storage}/{path}".rstrip("/") if path and path != "." else storage


def catalog_asset_uri(catalog_uri: str) -> str:
    """The Asset URI of the catalog at ``catalog_uri`` (a path, ``file://``, ``s3://``...).

    Raises:
        ValueError: the URI has a storage scheme Olympia does not support.
    """
    parts = urlsplit(catalog_uri)
    scheme = parts.scheme.lower() if len(parts.scheme) > 1 else ""
    if scheme not in _STORAGES:
        raise ValueError(f"unsupported catalog URI {catalog_uri!r}: use {supported()}")
    storage = _STORAGES[scheme]
    if storage == "file":
        local = parts.path if scheme else catalog_uri
        path = os.path.abspath(os.path.expanduser(local))
    else:
        path = parts.netloc + "/" + parts.path
    return f"{SCHEME}://{_location(storage, path)}"


def normalize_asset_uri(parts: SplitResult) -> SplitResult:
    """Airflow's normaliser for ``olympia://`` Asset URIs (registered in the provider info):
    the storage name lowercased and its aliases folded, the path cleaned, only the
    ``object`` query key kept.

    Raises:
        ValueError: not an Olympia Asset URI (Airflow reports it against the DAG).
    """
    storage = _STORAGES.get(parts.netloc.lower()) if parts.netloc else None
    if storage is None:
        names = ", ".join(scheme.name for scheme in TABLE)
        raise ValueError(f"an olympia:// Asset URI starts with the catalog's storage "
                         f"({names}), not {parts.netloc!r}")
    query = parse_qsl(parts.query)
    if any(key != "object" for key, _ in query) or len(query) > 1:
        raise ValueError("the only query key of an olympia:// Asset URI is 'object'")
    storage_part, _, path = _location(storage, parts.path).partition("/")
    return parts._replace(netloc=storage_part, path="/" + path if path else "",
                          query=urlencode(query))


def catalog_asset(catalog_uri: str) -> Asset:
    """The Asset of the catalog at ``catalog_uri``; its name is its URI."""
    uri = catalog_asset_uri(catalog_uri)
    return Asset(name=uri, uri=uri)


def object_asset(catalog_uri: str, object_name: str) -> Asset:
    """The Asset of one namespace (``ns``) or table/view (``ns.name``) of the catalog."""
    uri = f"{catalog_asset_uri(catalog_uri)}?{urlencode({'object': object_name})}"
    return Asset(name=uri, uri=uri)


def changes_alias(olympia_conn_id: str = "olympia_default") -> AssetAlias:
    """Outlet alias under which apply emits, only when it commits a version, the catalog's
    Asset event and one event per changed object it is asked to announce. (Airflow emits an
    event for every plain Asset outlet of a successful task, so an apply that changed
    nothing would still trigger whatever is scheduled on a plain ``catalog_asset()`` outlet.)
    """
    return AssetAlias(f"olympia-changes-{olympia_conn_id}")
