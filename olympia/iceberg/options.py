"""pyiceberg catalog properties -> Olympia storage options, by the catalog's storage scheme.

The same properties configure pyiceberg's FileIO (which reads them itself) and the storage of
the Olympia catalog files, so one set of credentials serves both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olympia.storage.schemes import scheme_of

# properties passed to olympia.storage.Storage as they are (after this prefix)
STORAGE_PREFIX = "olympia.storage."


def storage_options(uri: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    """The Olympia storage options for the catalog at ``uri``.

    The scheme's profile (:mod:`olympia.storage.schemes`) translates its FileIO properties
    (``s3.*``, ``gcs.*``, ``adls.*``); ``olympia.storage.<option>`` passes ``<option>``
    through (``true``/``false`` and numbers are converted).

    Raises:
        InvalidArgumentError: a value has the wrong form, or a property of the scheme's
            family that its catalog files could not honour (the message names the
            property, never its value).
    """
    scheme = scheme_of(uri)
    options = scheme.profile.storage_options(properties) if scheme else {}
    for prop, value in properties.items():
        if prop.startswith(STORAGE_PREFIX) and value is not None:
            options[prop[len(STORAGE_PREFIX):]] = _scalar(str(value))
    return options


def iceberg_properties(uri: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The pyiceberg FileIO properties for tables next to a catalog opened with the storage
    ``options`` (the inverse of :func:`storage_options`, by the scheme's profile: on S3 the
    endpoint, region and credentials as ``s3.*``, and so on)."""
    scheme = scheme_of(uri)
    return scheme.profile.iceberg_properties(options) if scheme else {}


def _scalar(value: str) -> Any:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(value)
    except ValueError:
        return value
