"""The data source's options: which catalog and table, time travel, planning, write settings,
and the catalog properties (storage options and credentials).

Values come from the reader/writer options, falling back to the Spark configuration captured
by :func:`olympia.spark.register` (``spark.olympia.<option>``). Keys are case-insensitive, as
Spark's are. Nothing is taken silently: an option that is neither one of the source's (read
and write options are distinct sets) nor a catalog property (:func:`is_catalog_property`) is
refused, naming the nearest valid name. Property values may be secrets: they are kept out of
``repr`` and never put into a message.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyiceberg.io

from olympia.exceptions import InvalidArgumentError
from olympia.iceberg.options import STORAGE_PREFIX
from olympia.iceberg.session import (
    CACHE_PROPERTY,
    CREATE_PROPERTY,
    TRANSACTION_PROPERTY,
    WAREHOUSE,
)
from olympia.spark.write_options import (
    CHECK_NULLABILITY,
    OVERWRITE_MODE,
    REPLACE_WHERE,
    TARGET_FILE_SIZE,
    WRITE_OPTION_NAMES,
    WriteOptions,
)
from olympia.storage.schemes import scheme_of, supported

CONF_PREFIX = "spark.olympia."
CATALOG = "catalog"
PATH = "path"  # what load(...) and save(...) set
# catalog-version time travel: every table of a query at one Olympia version
TIME_TRAVEL = ("version", "as_of", "export")
# a distributed transaction the query reads and writes inside
TRANSACTION = "transaction"
# Iceberg's read options choosing the table's snapshot (at most one)
SNAPSHOT_ID = "snapshot-id"
SNAPSHOT_ID_ALIAS = "snapshot_id"  # the earlier spelling, still accepted
AS_OF_TIMESTAMP = "as-of-timestamp"
BRANCH = "branch"
TAG = "tag"
SNAPSHOT_CHOICE = (SNAPSHOT_ID, SNAPSHOT_ID_ALIAS, AS_OF_TIMESTAMP, BRANCH, TAG)
SPLIT_SIZE = "split_size"
PARALLELISM = "parallelism"
COLUMNS = "columns"
# lower-cased names, as Spark hands option keys
READ_OPTION_NAMES = frozenset({CATALOG, PATH, *TIME_TRAVEL, *SNAPSHOT_CHOICE, SPLIT_SIZE,
                               PARALLELISM, COLUMNS, TRANSACTION})
WRITE_SIDE_NAMES = frozenset({CATALOG, PATH, TRANSACTION, *WRITE_OPTION_NAMES})
# options that may be set once in the Spark configuration (spark.olympia.<option>); the
# others choose what one query reads or replaces, so they are options of that query only
# (partitionOverwriteMode follows Spark's own spark.sql.sources.partitionOverwriteMode)
CONFIGURABLE = frozenset({CATALOG, SPLIT_SIZE, PARALLELISM, CHECK_NULLABILITY,
                          TARGET_FILE_SIZE, TRANSACTION})
# documented spelling of the names Spark lower-cases
SPELLING = {OVERWRITE_MODE: "partitionOverwriteMode", REPLACE_WHERE: "replaceWhere"}

# catalog properties: these names, any olympia.storage.<option>, and pyiceberg's FileIO names
CATALOG_PROPERTY_NAMES = frozenset({WAREHOUSE, pyiceberg.io.PY_IO_IMPL, CREATE_PROPERTY,
                                    CACHE_PROPERTY})
FILE_IO_PREFIXES = ("s3.", "client.", "gcs.", "adls.", "hdfs.", "hf.")
FILE_IO_PROPERTY_NAMES = frozenset(
    value for name, value in vars(pyiceberg.io).items()
    if name.isupper() and isinstance(value, str) and value.startswith(FILE_IO_PREFIXES))
DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
CATALOG_NAME = "olympia"


def is_catalog_property(name: str) -> bool:
    """Whether an option is a catalog property the source passes to ``OlympiaCatalog``.

    Args:
        name: the option's lower-cased key.

    Returns:
        True for ``warehouse``, ``py-io-impl``, ``olympia.create``,
        ``olympia.metadata-cache-size``, ``olympia.storage.<option>`` and the properties
        pyiceberg's FileIO reads (the ``s3.*``, ``client.*``, ``gcs.*``, ``adls.*``,
        ``hdfs.*`` and ``hf.*`` names :mod:`pyiceberg.io` defines).
    """
    return (name in CATALOG_PROPERTY_NAMES or name in FILE_IO_PROPERTY_NAMES
            or (name.startswith(STORAGE_PREFIX) and len(name) > len(STORAGE_PREFIX)))


def spelled(name: str) -> str:
    """An option's documented spelling, for messages.

    Args:
        name: the option's lower-cased key.

    Returns:
        ``replaceWhere`` for ``replacewhere``, and so on; most names are lower-case already.
    """
    return SPELLING.get(name, name)


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options of one read or write.

    Attributes:
        catalog_uri: where the Olympia catalog lives.
        table: ``namespace.table``.
        properties: catalog properties (``s3.*``, ``olympia.storage.*``, ``warehouse``, ...).
        version, as_of, export: catalog-version time travel (at most one).
        transaction: a distributed transaction to read and write inside (none with time
            travel).
        snapshot_id, as_of_timestamp, branch, tag: the table snapshot a read chooses (at
            most one; None of them: the current snapshot).
        split_size: target bytes of data files per Spark partition.
        parallelism: Spark partitions to aim for when the files allow.
        columns: the top-level columns a read returns (empty: all of them).
        write: the write options (defaults on a read).
    """

    catalog_uri: str
    table: str
    properties: dict[str, str] = field(repr=False)
    version: int | None = None
    as_of: str | None = None
    export: str | None = None
    transaction: str | None = None
    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    branch: str | None = None
    tag: str | None = None
    split_size: int = DEFAULT_SPLIT_SIZE
    parallelism: int = 1
    columns: tuple[str, ...] = ()
    write: WriteOptions = field(default_factory=WriteOptions)

    @classmethod
    def parse(cls, options: Mapping[str, str], defaults: Mapping[str, str], *,
              write: bool = False) -> SourceOptions:
        """Check and merge ``options`` over ``defaults`` (the ``spark.olympia.*``
        configuration), both keyed case-insensitively.

        Args:
            options: the read's or write's options (``path`` is the table).
            defaults: Spark configuration without its ``spark.olympia.`` prefix.
            write: parse for a write (write options) rather than a read.

        Returns:
            The parsed options; ``properties`` holds the catalog properties.

        Raises:
            InvalidArgumentError: no catalog or table; an option that is not one of this
                side's nor a catalog property; a configuration default that is not an option
                or may not be configured; a malformed number; more than one of
                version/as_of/export or of snapshot-id/as-of-timestamp/branch/tag. Messages
                name the table and options, never values of properties.
        """
        given = {k.lower(): str(v) for k, v in options.items() if v is not None}
        configured = {k.lower(): str(v) for k, v in defaults.items() if v is not None}
        table = given.get(PATH, "").strip()
        where = f"table {table}" if table else "the olympia data source"
        for key in configured:
            _check_default(key, where)
        for key in given:
            _check_option(key, where, write=write)
        merged = {**configured, **given}
        uri = merged.get(CATALOG, "").strip()
        if not uri:
            raise InvalidArgumentError(
                "the olympia data source needs the catalog: .option('catalog', URI) or the "
                "Spark configuration spark.olympia.catalog")
        if not table:
            raise InvalidArgumentError(
                "the olympia data source needs a table: .load('namespace.table') or "
                ".save('namespace.table')")
        _at_most_one({**given, TRANSACTION: merged.get(TRANSACTION, "")},
                     (*TIME_TRAVEL, TRANSACTION), "a catalog version or transaction", where)
        _at_most_one(given, SNAPSHOT_CHOICE, "a snapshot", where)
        snapshot_id = _number(given, SNAPSHOT_ID, where)
        if snapshot_id is None:
            snapshot_id = _number(given, SNAPSHOT_ID_ALIAS, where)
        try:
            write_options = WriteOptions.parse(merged) if write else WriteOptions()
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None
        return cls(
            catalog_uri=uri, table=table,
            properties={k: v for k, v in merged.items() if is_catalog_property(k)},
            version=_number(given, "version", where, minimum=0),
            as_of=given.get("as_of") or None,
            export=given.get("export") or None,
            transaction=merged.get(TRANSACTION, "").strip() or None,
            snapshot_id=snapshot_id,
            as_of_timestamp=_number(given, AS_OF_TIMESTAMP, where, minimum=0),
            branch=given.get(BRANCH) or None,
            tag=given.get(TAG) or None,
            split_size=_number(merged, SPLIT_SIZE, where, minimum=1) or DEFAULT_SPLIT_SIZE,
            parallelism=_number(merged, PARALLELISM, where, minimum=1) or 1,
            columns=tuple(c.strip() for c in (given.get(COLUMNS) or "").split(",")
                          if c.strip()),
            write=write_options,
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
        if self.transaction is not None:
            return f"inside transaction {self.transaction}"
        return "latest"

    def open_catalog(self) -> Any:
        """The latest OlympiaCatalog (``olympia.iceberg.OlympiaCatalog``), or inside the
        distributed transaction the options name.

        Raises:
            NoSuchTransactionError, TransactionExpiredError: no such open transaction.
        """
        from olympia.iceberg import OlympiaCatalog

        inside = {TRANSACTION_PROPERTY: self.transaction} if self.transaction else {}
        return OlympiaCatalog(CATALOG_NAME,
                              **{**self.properties, **inside, "uri": self.catalog_uri})

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


_PROPERTY_RULE = ("catalog properties are warehouse, py-io-impl, olympia.create, "
                  "olympia.metadata-cache-size, olympia.storage.<option> and pyiceberg's "
                  "FileIO properties (s3.*, client.*, gcs.*, adls.*, hdfs.*, hf.*); see "
                  "docs/SPARK.md, Options")


def _nearest(key: str, names: frozenset[str]) -> str:
    candidates = sorted({spelled(n) for n in names - {SNAPSHOT_ID_ALIAS}}
                        | CATALOG_PROPERTY_NAMES | FILE_IO_PROPERTY_NAMES)
    lowered = {c.lower(): c for c in candidates}
    (best,) = difflib.get_close_matches(key, list(lowered), n=1, cutoff=0.0)
    return lowered[best]


def _check_option(key: str, where: str, *, write: bool) -> None:
    own, other = ((WRITE_SIDE_NAMES, READ_OPTION_NAMES) if write
                  else (READ_OPTION_NAMES, WRITE_SIDE_NAMES))
    side, other_side = ("write", "read") if write else ("read", "write")
    if key in own or is_catalog_property(key):
        return
    if key in other:
        raise InvalidArgumentError(
            f"{where}: option {spelled(key)} is a {other_side} option; a {side} does not "
            "take it")
    raise InvalidArgumentError(
        f"{where}: a {side} has no option {key} (nearest: {_nearest(key, own)}); "
        f"{_PROPERTY_RULE}")


def _check_default(key: str, where: str) -> None:
    name = CONF_PREFIX + key
    if key in CONFIGURABLE or is_catalog_property(key):
        return
    if key in READ_OPTION_NAMES | WRITE_SIDE_NAMES:
        raise InvalidArgumentError(
            f"{where}: Spark configuration {name} cannot be set once for every query: give "
            f"{spelled(key)} as an option of the read or write")
    nearest = _nearest(key, CONFIGURABLE)
    raise InvalidArgumentError(
        f"{where}: Spark configuration {name} is not an option of the olympia data source "
        f"(nearest: {CONF_PREFIX}{nearest}); {_PROPERTY_RULE}")


def _at_most_one(given: Mapping[str, str], names: tuple[str, ...], what: str,
                 where: str) -> None:
    chosen = [n for n in names if given.get(n) not in (None, "")]
    if len(chosen) > 1:
        raise InvalidArgumentError(
            f"{where}: options {' and '.join(chosen)} both choose {what}: give one")


def properties_from_storage_options(options: Mapping[str, Any],
                                    catalog_uri: str = "s3://") -> dict[str, str]:
    """Catalog properties for the data source from Olympia storage options (what the CLI's
    ``-o`` and the Airflow connection hold), by the catalog's scheme: on S3 (the default)
    credentials, endpoint and region become the pyiceberg ``s3.*`` properties (which reach
    both the catalog files and the table files), on Google Cloud Storage ``gcs.*``, on Azure
    ``adls.*``; other scalar options pass as ``olympia.storage.<option>``.

    Raises:
        InvalidArgumentError: an option that has no pyiceberg counterpart (on S3 a nested
            dict other than the endpoint and region), naming it, or an unsupported scheme.
    """
    scheme = scheme_of(catalog_uri)
    if scheme is None:
        raise InvalidArgumentError(f"unsupported catalog URI {catalog_uri!r} (use "
                                   f"{supported()})")
    return scheme.profile.data_source_properties(options)


def _number(options: Mapping[str, str], key: str, where: str,
            minimum: int | None = None) -> int | None:
    raw = options.get(key)
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgumentError(
            f"{where}: option {key} must be a whole number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(
            f"{where}: option {key} must be at least {minimum}, not {value}")
    return value
