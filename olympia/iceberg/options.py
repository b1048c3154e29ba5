"""pyiceberg catalog properties -> Olympia storage options (fsspec/s3fs).

The same properties configure pyiceberg's FileIO (which reads them itself) and the storage of
the Olympia catalog files, so one set of credentials serves both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from olympia.exceptions import InvalidArgumentError

# pyiceberg property -> (s3fs option path, value kind)
_S3: dict[str, tuple[tuple[str, ...], str]] = {
    "s3.endpoint": (("client_kwargs", "endpoint_url"), "str"),
    "s3.region": (("client_kwargs", "region_name"), "str"),
    "s3.access-key-id": (("key",), "str"),
    "s3.secret-access-key": (("secret",), "str"),
    "s3.session-token": (("token",), "str"),
    "s3.profile-name": (("profile",), "str"),
    "s3.anonymous": (("anon",), "bool"),
    "s3.connect-timeout": (("config_kwargs", "connect_timeout"), "float"),
    "s3.request-timeout": (("config_kwargs", "read_timeout"), "float"),
}
# properties passed to olympia.storage.Storage as they are (after this prefix)
STORAGE_PREFIX = "olympia.storage."


def storage_options(uri: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    """The Olympia storage options for the catalog at ``uri``.

    ``s3.*`` properties are translated for S3 catalogs; ``olympia.storage.<option>`` passes
    ``<option>`` through (``true``/``false`` and numbers are converted).

    Raises:
        InvalidArgumentError: a value has the wrong form (the message names the property,
            never its value).
    """
    options: dict[str, Any] = {}
    if urlsplit(uri).scheme in ("s3", "s3a"):
        for prop, (path, kind) in _S3.items():
            if properties.get(prop) is not None:
                _set(options, path, _convert(prop, str(properties[prop]), kind))
        if _convert("s3.force-virtual-addressing",
                    str(properties.get("s3.force-virtual-addressing", "false")), "bool"):
            _set(options, ("config_kwargs", "s3", "addressing_style"), "virtual")
    for prop, value in properties.items():
        if prop.startswith(STORAGE_PREFIX) and value is not None:
            options[prop[len(STORAGE_PREFIX):]] = _scalar(str(value))
    return options


def iceberg_properties(uri: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The pyiceberg FileIO properties for tables next to a catalog opened with the storage
    ``options`` (the inverse of :func:`storage_options`): an S3 catalog's endpoint, region
    and credentials as ``s3.*``, read through pyiceberg's fsspec FileIO (the s3fs client the
    catalog files use too)."""
    if urlsplit(uri).scheme not in ("s3", "s3a"):
        return {}
    out = {"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
    for prop, (path, _) in _S3.items():
        value: Any = options
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            out[prop] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _set(options: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        options = options.setdefault(part, {})
    options[path[-1]] = value


def _convert(prop: str, value: str, kind: str) -> Any:
    if kind == "bool":
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidArgumentError(f"property {prop} must be true or false")
        return lowered == "true"
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            raise InvalidArgumentError(f"property {prop} must be a number of seconds") from None
    return value


def _scalar(value: str) -> Any:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(value)
    except ValueError:
        return value
