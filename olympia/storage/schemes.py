"""The scheme table: which module serves each storage scheme.

A scheme's module (its *profile*) owns everything Olympia knows of that scheme: the backend
(``open_backend``) and the mapping of its storage options to and from pyiceberg's FileIO
properties (``storage_options``, ``iceberg_properties``), which the Spark data source and the
Airflow connection use too (``data_source_properties``; ``CONNECTION`` names the options
a connection's Login and Password give). Every place that once switched on a
scheme (the storage facade, the catalog properties, the Iceberg location rule, the Spark
options, the provider's Asset names) reads this table. A new scheme is one module with those
four functions and one line in :data:`TABLE`. Modules are imported when first used, so
reading the table imports no cloud client.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from olympia.storage.backends import Opened
from olympia.storage.retry import StorageSettings


class Profile(Protocol):
    """What a scheme's module defines."""

    #: The storage options an Airflow connection's Login and Password give.
    CONNECTION: tuple[str, str]

    def open_backend(self, uri: str, options: dict[str, Any],
                     settings: StorageSettings) -> Opened:
        """The root, backend and canonical URI of a catalog at ``uri``; consumes the
        ``options`` it uses and refuses those it does not know."""
        ...

    def storage_options(self, properties: Mapping[str, Any]) -> dict[str, Any]:
        """Storage options from pyiceberg catalog properties."""
        ...

    def iceberg_properties(self, options: Mapping[str, Any]) -> dict[str, str]:
        """pyiceberg FileIO properties for tables next to a catalog opened with ``options``."""
        ...

    def data_source_properties(self, options: Mapping[str, Any]) -> dict[str, str]:
        """Catalog properties for the Spark data source from storage options."""
        ...


@dataclass(frozen=True)
class Scheme:
    """One line of the scheme table.

    Attributes:
        name: The canonical name (Asset URIs and messages use it).
        uri_schemes: The URI schemes a catalog URI may use (``""``: a plain local path).
        location_schemes: The spellings of an Iceberg location that a FileIO reads as this
            scheme (the location rule treats them as one).
        module: The profile's module.
    """

    name: str
    uri_schemes: tuple[str, ...]
    location_schemes: tuple[str, ...]
    module: str

    @property
    def profile(self) -> Profile:
        return cast(Profile, importlib.import_module(self.module))


TABLE = (
    Scheme("file", ("", "file", "local"), ("file",), "olympia.storage.file"),
    Scheme("memory", ("memory",), (), "olympia.storage.memory"),
    Scheme("s3", ("s3", "s3a"), ("s3", "s3a", "s3n"), "olympia.storage.s3"),
    Scheme("gs", ("gs",), ("gs", "gcs"), "olympia.storage.gs"),
    Scheme("abfs", ("abfs", "abfss", "az"), ("abfs", "abfss", "az"), "olympia.storage.abfs"),
)
#: URI scheme -> its line of the table.
SCHEMES: dict[str, Scheme] = {alias: s for s in TABLE for alias in s.uri_schemes}
#: Location scheme -> the name the location rule compares (``file`` is ``""``).
LOCATION_SCHEMES: dict[str, str] = {
    alias: "" if s.name == "file" else s.name for s in TABLE for alias in s.location_schemes}


def uri_scheme(uri: str) -> str:
    """The lower-cased scheme of a catalog URI; ``""`` for a plain path (``C:`` is none)."""
    scheme = urlsplit(uri).scheme.lower()
    return scheme if len(scheme) > 1 else ""


def scheme_of(uri: str) -> Scheme | None:
    """The table's line for a catalog URI, or None for a scheme Olympia does not serve."""
    return SCHEMES.get(uri_scheme(uri))


def supported() -> str:
    """The URI forms Olympia serves, for messages."""
    return ", ".join(f"{s}://" if s else "a local path" for s in SCHEMES)
