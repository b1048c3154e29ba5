"""Retention policy: which versions expire and how old an unreferenced file must be to go.

The expiry job (:mod:`olympia.expire`) deletes what this policy no longer keeps; the Iceberg
catalog (:mod:`olympia.iceberg.retention`) refuses to remove the snapshots the versions it keeps
read. Settings come from, in order: the caller, the catalog's own properties
(``olympia.expire.keep-last``, ``olympia.expire.older-than``, ``olympia.expire.grace``), the
built-in defaults. Settings below the safety minimum are refused unless ``force`` is set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import unquote

from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.distributed import read_record
from olympia.catalog.files import CatalogFiles
from olympia.exceptions import InvalidArgumentError, NoSuchTransactionError

MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w))+$")

# catalog properties holding the catalog's own defaults
KEEP_LAST = "olympia.expire.keep-last"
OLDER_THAN = "olympia.expire.older-than"
GRACE = "olympia.expire.grace"

DEFAULT_KEEP_LAST = 10
DEFAULT_OLDER_THAN_MS = 7 * MS["d"]
DEFAULT_GRACE_MS = 3 * MS["d"]
# Below these a run needs force=True. Files of a commit in flight are unreferenced until its
# root lands, and readers may still be using a version superseded a moment ago; both
# minimums also absorb clock skew between this job, the writers and the storage server.
MIN_GRACE_MS = MS["h"]
MIN_OLDER_THAN_MS = MS["h"]


def parse_duration(text: str | int) -> int:
    """Milliseconds from ``0s``, ``500ms``, ``36h``, ``7d``, ``2w`` or ``1d12h``; an int is
    already milliseconds."""
    if isinstance(text, bool):
        raise InvalidArgumentError(f"invalid duration {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise InvalidArgumentError(f"invalid duration {text}: must not be negative")
        return text
    compact = str(text).strip().replace(" ", "").lower()
    if not _DURATION.match(compact):
        raise InvalidArgumentError(
            f"invalid duration {text!r}: use a number and a unit (ms, s, m, h, d, w), "
            "e.g. 0s, 36h, 7d or 1d12h")
    return sum(int(n) * MS[unit] for n, unit in _PART.findall(compact))


def format_duration(ms: int) -> str:
    """The shortest exact spelling of ``ms`` (``3d``, ``90m``, ``1500ms``)."""
    for unit in ("w", "d", "h", "m", "s"):
        if ms and ms % MS[unit] == 0:
            return f"{ms // MS[unit]}{unit}"
    return f"{ms}ms" if ms else "0s"


@dataclass(frozen=True)
class ExpirePolicy:
    """Keep the last ``keep_last`` versions AND every version superseded less than
    ``older_than_ms`` ago; delete an unreferenced file only when it is older than
    ``grace_ms``. ``force`` allows settings below the safety minimum.

    The latest version, versions recorded as exports and the roots of live distributed
    transactions are kept whatever the policy says. ``None`` means: the catalog's property,
    else the built-in default (see :meth:`resolved`).
    """

    keep_last: int | None = None
    older_than_ms: int | None = None
    grace_ms: int | None = None
    force: bool = False

    @classmethod
    def from_catalog(cls, catalog: Catalog, **overrides: Any) -> ExpirePolicy:
        """The catalog's policy with ``overrides`` (``keep_last``, ``older_than_ms`` or
        ``older_than``, ``grace_ms`` or ``grace``, ``force``; None = not overridden)."""
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in overrides.items():
            if value is None:
                continue
            if key in ("older_than", "grace"):
                key, value = f"{key}_ms", parse_duration(value)
            if key not in names:
                raise InvalidArgumentError(f"unknown expiry setting {key!r}")
            values[key] = value
        return cls(**values).resolved(catalog.properties)

    def resolved(self, properties: Mapping[str, str]) -> ExpirePolicy:
        """Every unset value filled from the catalog ``properties``, then the defaults;
        validated."""

        def duration(name: str, default: int) -> int:
            if name not in properties:
                return default
            try:
                return parse_duration(properties[name])
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"catalog property {name}: {exc}") from None

        keep = self.keep_last
        if keep is None:
            raw = properties.get(KEEP_LAST, str(DEFAULT_KEEP_LAST))
            if not raw.strip().isdigit():
                raise InvalidArgumentError(
                    f"catalog property {KEEP_LAST}={raw!r} is not a whole number")
            keep = int(raw)
        policy = replace(
            self, keep_last=keep,
            older_than_ms=(self.older_than_ms if self.older_than_ms is not None
                           else duration(OLDER_THAN, DEFAULT_OLDER_THAN_MS)),
            grace_ms=self.grace_ms if self.grace_ms is not None else duration(
                GRACE, DEFAULT_GRACE_MS))
        policy.validate()
        return policy

    def validate(self) -> None:
        """Refuse impossible settings, and settings below the safety minimum without force."""
        if self.keep_last is not None and (isinstance(self.keep_last, bool)
                                           or self.keep_last < 1):
            raise InvalidArgumentError("keep-last must be at least 1 (the latest version)")
        for name, value in (("older-than", self.older_than_ms), ("grace", self.grace_ms)):
            if value is not None and value < 0:
                raise InvalidArgumentError(f"{name} must not be negative")
        if self.force:
            return
        if self.grace_ms is not None and self.grace_ms < MIN_GRACE_MS:
            raise InvalidArgumentError(
                f"grace {format_duration(self.grace_ms)} is below the safety minimum "
                f"{format_duration(MIN_GRACE_MS)}: files of commits still in flight could be "
                "deleted. Use force to override.")
        if self.older_than_ms is not None and self.older_than_ms < MIN_OLDER_THAN_MS:
            raise InvalidArgumentError(
                f"older-than {format_duration(self.older_than_ms)} is below the safety "
                f"minimum {format_duration(MIN_OLDER_THAN_MS)}: readers may still be using "
                "those versions. Use force to override.")

    def to_dict(self) -> dict[str, Any]:
        return {"keep_last": self.keep_last, "older_than_ms": self.older_than_ms,
                "grace_ms": self.grace_ms, "force": self.force}


def save_defaults(catalog: Catalog, policy: ExpirePolicy) -> int:
    """Store the settings ``policy`` gives (not None) as the catalog's own defaults, in a new
    version; returns it. Settings below the safety minimum need ``force``, as a run would."""
    policy.validate()
    values = {KEEP_LAST: None if policy.keep_last is None else str(policy.keep_last),
              OLDER_THAN: None if policy.older_than_ms is None
              else format_duration(policy.older_than_ms),
              GRACE: None if policy.grace_ms is None else format_duration(policy.grace_ms)}
    changed = {k: v for k, v in values.items() if v is not None}
    if not changed:
        raise InvalidArgumentError("give at least one of keep-last, older-than and grace")
    with catalog.transaction() as txn:
        new_def = pb.CatalogDef()
        new_def.CopyFrom(txn.catalog_def)
        new_def.properties.update(changed)
        txn.set_catalog_def(new_def, actions.make(A.CATALOG_ALTER, None,
                                                  info={"expiry defaults": "set"}))
    return catalog.version


@dataclass(frozen=True)
class Decision:
    """Which versions a run keeps, fixed before anything is listed or changed."""

    now_ms: int
    cutoff_ms: int   # unreferenced files last modified before this may be deleted
    old_oldest: int  # vn/oldest when the run started
    new_oldest: int  # versions below this expire
    latest: int      # the latest version when the run started
    order: int       # the catalog's B-tree order (node files are decoded with it)

    @property
    def versions_expired(self) -> int:
        return self.new_oldest - self.old_oldest


def decide(files: CatalogFiles, policy: ExpirePolicy, now_ms: int) -> Decision:
    """The new oldest version for a resolved ``policy``.

    Version v expires when it is not among the last ``keep_last`` versions AND was
    superseded (version v+1 created) at least ``older_than_ms`` before ``now_ms``, AND no
    distributed transaction live at the grace cutoff began at or before it (its commit
    checks every version since its beginning for conflicts, and looks there for the version
    it landed). Root creation times strictly increase with the version (format ruling 9), so
    "superseded long enough ago" is monotonic in v and a binary search needs O(log V) root
    reads.
    """
    if policy.keep_last is None or policy.older_than_ms is None or policy.grace_ms is None:
        raise ValueError("decide() needs a resolved policy")
    old_oldest = files.oldest_version()
    latest_root = files.discover_latest()
    latest = latest_root.version
    limit = now_ms - policy.older_than_ms
    low, high = old_oldest, max(old_oldest, latest - policy.keep_last + 1)
    # invariant: every v < low may expire; no v >= high may
    while low < high:
        mid = (low + high) // 2
        if files.read_root(mid + 1).created_at_millis <= limit:
            low = mid + 1
        else:
            high = mid
    cutoff = now_ms - policy.grace_ms
    began = [record.beginning_version for record in transaction_records(files)
             if record.expire_at_millis > cutoff]
    low = max(old_oldest, min([low, *began]))
    return Decision(now_ms, cutoff, old_oldest, low, latest, latest_root.catalog_def.order)


def transaction_records(files: CatalogFiles) -> list[pb.DistributedTransactionDef]:
    """Every distributed transaction's record (one ended since the listing is left out)."""
    records = []
    for found in files.storage.list("dtxn/"):
        if not found.path.endswith(".binpb"):
            continue
        txn_id = unquote(found.path.removeprefix("dtxn/").removesuffix(".binpb"))
        try:
            records.append(read_record(files, txn_id).record)
        except NoSuchTransactionError:
            continue
    return records


def export_roots(catalog_def: pb.CatalogDef) -> dict[str, str]:
    """Root path -> reason for every export a catalog definition records."""
    out = {path: f"export {name}" for name, path in catalog_def.exported_snapshots.items()}
    for name, export in catalog_def.exports.items():
        if export.root_path:
            out.setdefault(export.root_path, f"export {name}")
    return out
