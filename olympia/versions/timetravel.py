"""Time travel: read-only views of a catalog at a version, an instant, or an export."""

from __future__ import annotations

from datetime import UTC, datetime

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import path_version
from olympia.catalog.reader import Snapshot
from olympia.exceptions import InvalidArgumentError, NoSuchExportError, VersionExpiredError


def at_version(catalog: Catalog, version: int) -> Snapshot:
    """The catalog as it was at ``version`` (one root read)."""
    return catalog.at_version(version)


def at_timestamp(catalog: Catalog, millis: int) -> Snapshot:
    """The version that was latest at ``millis`` (epoch milliseconds).

    Root timestamps strictly increase with versions (FORMAT.md, R9), so the answer of the
    spec's previous_root walk is the largest version created at or before ``millis``; it is
    found by bisection with O(log V) root reads.
    """
    latest = catalog.refresh()
    oldest = catalog.files.oldest_version()
    low_root = catalog.files.read_root(oldest)
    if millis < low_root.created_at_millis:
        raise VersionExpiredError(
            f"no version was latest at {format_millis(millis)}: the oldest kept version "
            f"{oldest} was created at {format_millis(low_root.created_at_millis)}")
    low, high = oldest, latest  # invariant: created_at(low) <= millis
    while low < high:
        mid = (low + high + 1) // 2
        if catalog.files.read_root(mid).created_at_millis <= millis:
            low = mid
        else:
            high = mid - 1
    return catalog.at_version(low)


def at_export(catalog: Catalog, name: str) -> Snapshot:
    """The version recorded under the export ``name`` in the latest catalog definition."""
    catalog.refresh()
    exported = catalog.catalog_def.exported_snapshots
    if name not in exported:
        known = ", ".join(sorted(exported)) or "none"
        raise NoSuchExportError(f"unknown export {name!r} (exports: {known})")
    version = path_version(exported[name])
    if version is None:
        raise NoSuchExportError(
            f"export {name!r} records an invalid root path {exported[name]!r}")
    return Snapshot(catalog.files, catalog.files.read_root(version))


def resolve(catalog: Catalog, version: int | str | None = None, as_of: int | str | None = None,
            export: str | None = None) -> Snapshot:
    """Pick a view by at most one of ``version`` (a number, or a non-numeric string naming an
    export, as the spec reads system versions), ``as_of`` (epoch millis or ISO-8601) or
    ``export``; with none, the latest version."""
    if sum(x is not None for x in (version, as_of, export)) > 1:
        raise InvalidArgumentError("give only one of version, as_of and export")
    if isinstance(version, str):
        if version.strip().isdigit():
            version = int(version)
        else:
            export = version
            version = None
    if version is not None:
        return at_version(catalog, version)
    if as_of is not None:
        return at_timestamp(catalog, parse_instant(as_of))
    if export is not None:
        return at_export(catalog, export)
    catalog.refresh()
    return catalog.snapshot


def parse_instant(value: int | str) -> int:
    """Epoch milliseconds from an int, a digit string, or an ISO-8601 timestamp (UTC if naive)."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            f"not a timestamp: {value!r} (use ISO-8601 such as 2026-11-22T10:00:00Z, "
            "or epoch milliseconds)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def format_millis(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")
