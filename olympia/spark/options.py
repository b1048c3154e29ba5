"""The data source's options: which catalog and table, time travel, planning, and the catalog
properties (storage options and credentials) that everything else is.

Values come from the reader/writer options, falling back to the Spark configuration captured
by :func:`olympia.spark.register` (``spark.olympia.<option>``). Property values may be
secrets: they are kept out of ``repr`` and never put into a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from olympia.exceptions import InvalidArgumentError

CONF_PREFIX = "spark.olympia."
CATALOG = "catalog"
TIME_TRAVEL = ("version", "as_of", "export")
SNAPSHOT_ID = "snapshot_id"
SPLIT_SIZE = "split_size"
PARALLELISM = "parallelism"
COLUMNS = "columns"
# options of the data source itself; every other option is a catalog property
OWN = {CATALOG, "path", "table", *TIME_TRAVEL, SNAPSHOT_ID, SPLIT_SIZE, PARALLELISM,
       COLUMNS}
DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
CATALOG_NAME = "olympia"


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options of one read or write.

    Attributes:
        catalog_uri: where the Olympia catalog lives.
        table: ``namespace.table``.
        properties: catalog properties (``s3.*``, ``olympia.storage.*``, ``warehouse``, ...).
        version, as_of, export: catalog-version time travel (at most one).
        snapshot_id: Iceberg snapshot to read.
        split_size: target bytes of data files per Spark partition.
        parallelism: Spark partitions to aim for when the files allow.
        columns: the top-level columns a read returns (empty: all of them).
    """

    catalog_uri: str
    table: str
    properties: dict[str, str] = field(repr=False)
    version: int | None = None
    as_of: str | None = None
    export: str | None = None
    snapshot_id: int | None = None
    split_size: int = DEFAULT_SPLIT_SIZE
    parallelism: int = 1
    columns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str], defaults: Mapping[str, str]) -> SourceOptions:
        """Merge ``options`` over ``defaults`` (both keyed case-insensitively).

        Raises:
            InvalidArgumentError: no catalog or table, a malformed number, or more than one
                of version/as_of/export (messages name options, never values of properties).
        """
        merged = {k.lower(): str(v) for k, v in defaults.items() if v is not None}
        merged.update({k.lower(): str(v) for k, v in options.items() if v is not None})
        uri = merged.get(CATALOG, "").strip()
        if not uri:
            raise InvalidArgumentError(
                "the olympia data source needs the catalog: .option('catalog', URI) or the "
                "Spark configuration spark.olympia.catalog")
        table = (options.get("path") or options.get("table") or "").strip()
        if not table:
            raise InvalidArgumentError(
                "the olympia data source needs a table: .load('namespace.table') or "
                ".save('namespace.table')")
        chosen = [k for k in TIME_TRAVEL if options.get(k) not in (None, "")]
        if len(chosen) > 1:
            raise InvalidArgumentError(
                f"options {' and '.join(chosen)} both choose a catalog version: give one")
        return cls(
            catalog_uri=uri, table=table,
            properties={k: v for k, v in merged.items() if k not in OWN},
            version=_number(options, "version", minimum=0),
            as_of=options.get("as_of") or None,
            export=options.get("export") or None,
            snapshot_id=_number(options, SNAPSHOT_ID),
            split_size=_number(merged, SPLIT_SIZE, minimum=1) or DEFAULT_SPLIT_SIZE,
            parallelism=_number(merged, PARALLELISM, minimum=1) or 1,
            columns=tuple(c.strip() for c in (options.get(COLUMNS) or "").split(",")
                          if c.strip()),
        )

    @property
    def time_travel(self) -> str:
        """How the catalog version is chosen, for messages (``latest`` when not)."""
        if self.version is not None:
            return f"version {self.version}"
        if self.as_of is not None:
            return f"as of {self.as_of}"
        if self.export is not None:
            return f"export {self.export}"
        return "latest"

    def open_catalog(self) -> Any:
        """The latest OlympiaCatalog (``olympia.iceberg.OlympiaCatalog``)."""
        from olympia.iceberg import OlympiaCatalog

        return OlympiaCatalog(CATALOG_NAME, **{**self.properties, "uri": self.catalog_uri})

    def at_chosen_version(self, catalog: Any) -> Any:
        """``catalog`` (from :meth:`open_catalog`) at the version the options choose:
        itself, or a read-only view sharing its storage.

        Raises:
            NoSuchVersionError, VersionExpiredError, NoSuchExportError: no such version.
        """
        if self.version is not None:
            return catalog.at_version(self.version)
        if self.as_of is not None:
            return catalog.as_of(self.as_of)
        if self.export is not None:
            return catalog.at_export(self.export)
        return catalog


# s3fs option path (as Olympia storage options spell it) -> pyiceberg property
_S3_PROPERTIES = {("key",): "s3.access-key-id", ("secret",): "s3.secret-access-key",
                  ("token",): "s3.session-token", ("profile",): "s3.profile-name",
                  ("anon",): "s3.anonymous", ("client_kwargs", "endpoint_url"): "s3.endpoint",
                  ("client_kwargs", "region_name"): "s3.region"}


def properties_from_storage_options(options: Mapping[str, Any]) -> dict[str, str]:
    """Catalog properties for the data source from Olympia storage options (what the CLI's
    ``-o`` and the Airflow connection hold): S3 credentials, endpoint and region become the
    pyiceberg ``s3.*`` properties (which reach both the catalog files and the table files);
    other scalar options pass as ``olympia.storage.<option>``.

    Raises:
        InvalidArgumentError: an option Olympia passes to s3fs that has no pyiceberg
            counterpart (a nested dict other than the endpoint and region), naming it.
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            for inner, inner_value in value.items():
                prop = _S3_PROPERTIES.get((key, inner))
                if prop is None:
                    raise InvalidArgumentError(
                        f"storage option {key}.{inner} has no pyiceberg counterpart: give the "
                        "data source its s3.* properties directly")
                out[prop] = str(inner_value)
        elif (key,) in _S3_PROPERTIES:
            prop = _S3_PROPERTIES[(key,)]
            out[prop] = str(value).lower() if isinstance(value, bool) else str(value)
        else:
            out[f"olympia.storage.{key}"] = str(value)
    return out


def _number(options: Mapping[str, str], key: str, minimum: int | None = None) -> int | None:
    raw = options.get(key)
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {key} must be a whole number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"option {key} must be at least {minimum}, not {value}")
    return value
