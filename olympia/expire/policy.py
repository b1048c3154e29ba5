"""Retention policy: which versions expire and how old an unreferenced file must be to go."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.exceptions import InvalidArgumentError

MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")

# catalog properties holding the catalog's own defaults
KEEP_LAST = "olympia.expire.keep-last"
OLDER_THAN = "olympia.expire.older-than"
GRACE = "olympia.expire.grace"

DEFAULT_KEEP_LAST = 10
DEFAULT_OLDER_THAN_MS = 7 * MS["d"]
DEFAULT_GRACE_MS = 3 * MS["d"]
# below these, a run needs force=True: files of in-flight commits and exports are young,
# and readers may still be using a version that was superseded a moment ago
MIN_GRACE_MS = MS["h"]
MIN_OLDER_THAN_MS = MS["h"]


def parse_duration(text: str | int) -> int:
    """Milliseconds from ``0s``, ``36h``, ``7d``, ``2w``, ``500ms`` (an int is milliseconds)."""
    if isinstance(text, int):
        return text
    m = _DURATION.match(str(text))
    if not m:
        raise InvalidArgumentError(
            f"invalid duration {text!r}: use a number and a unit (ms, s, m, h, d, w), e.g. 36h")
    return int(m.group(1)) * MS[m.group(2)]


def format_duration(ms: int) -> str:
    for unit in ("w", "d", "h", "m", "s"):
        if ms and ms % MS[unit] == 0:
            return f"{ms // MS[unit]}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True)
class ExpirePolicy:
    """Keep the last ``keep_last`` versions AND every version superseded less than
    ``older_than_ms`` ago; delete unreferenced files only when older than ``grace_ms``.

    The latest version, exported versions and the roots of live distributed transactions
    are always kept. None means: the catalog's default (its properties), else the built-in
    default.
    """

    keep_last: int | None = None
    older_than_ms: int | None = None
    grace_ms: int | None = None
    force: bool = False

    @classmethod
    def from_catalog(cls, catalog: Catalog, **overrides: Any) -> ExpirePolicy:
        return cls(**{k: v for k, v in overrides.items() if v is not None}).resolved(
            catalog.properties)

    def resolved(self, properties: Mapping[str, str]) -> ExpirePolicy:
        """Fill unset values from catalog properties, then built-in defaults; validate."""
        keep = self.keep_last if self.keep_last is not None else int(
            properties.get(KEEP_LAST, DEFAULT_KEEP_LAST))
        older = self.older_than_ms if self.older_than_ms is not None else (
            parse_duration(properties[OLDER_THAN]) if OLDER_THAN in properties
            else DEFAULT_OLDER_THAN_MS)
        grace = self.grace_ms if self.grace_ms is not None else (
            parse_duration(properties[GRACE]) if GRACE in properties else DEFAULT_GRACE_MS)
        policy = replace(self, keep_last=keep, older_than_ms=older, grace_ms=grace)
        policy.validate()
        return policy

    def validate(self) -> None:
        if self.keep_last is not None and self.keep_last < 1:
            raise InvalidArgumentError("keep_last must be at least 1 (the latest version)")
        for value in (self.older_than_ms, self.grace_ms):
            if value is not None and value < 0:
                raise InvalidArgumentError("durations must not be negative")
        if self.force:
            return
        if self.grace_ms is not None and self.grace_ms < MIN_GRACE_MS:
            raise InvalidArgumentError(
                f"grace {format_duration(self.grace_ms)} is below the safety minimum "
                f"{format_duration(MIN_GRACE_MS)}: files of commits still in flight could be "
                "deleted. Use force to override.")
        if self.older_than_ms is not None and self.older_than_ms < MIN_OLDER_THAN_MS:
            raise InvalidArgumentError(
                f"older-than {format_duration(self.older_than_ms)} is below the safety minimum "
                f"{format_duration(MIN_OLDER_THAN_MS)}: readers may still use those versions. "
                "Use force to override.")

    def to_dict(self) -> dict[str, Any]:
        return {"keep_last": self.keep_last, "older_than_ms": self.older_than_ms,
                "grace_ms": self.grace_ms, "force": self.force}
