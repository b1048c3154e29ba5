"""Drift: what changed outside a spec since it was last applied, and who changed it.

The last apply of a spec is the newest version whose recorded annotations say ``tool:
olympia apply`` with the spec's digest (see :func:`olympia.plan.apply.apply_plan`). When
the spec has been edited since (its digest is new), the newest apply that touched a
namespace the spec manages stands in. Every object the spec manages whose definition
differs between that version and the latest is drift, attributed to each later version
that wrote it, with the version's time and annotations (tool, user, git commit, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from olympia.catalog import actions
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.exceptions import InvalidArgumentError, OlympiaError
from olympia.plan.render import change_lines, paint
from olympia.plan.state import Scope
from olympia.plan.versiondiff import ObjectChange, version_diff
from olympia.spec.model import Spec
from olympia.versions.history import VersionInfo, version_info
from olympia.versions.timetravel import format_millis

APPLY_TOOL = "olympia apply"  # the ``tool`` annotation apply records


@dataclass
class Drifted:
    """One managed object changed since the last apply, and the versions that changed it."""

    change: ObjectChange
    versions: list[VersionInfo] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**self.change.to_dict(), "changed_in": [_version_dict(v) for v in self.versions]}


@dataclass
class DriftReport:
    """What changed outside the spec since ``baseline`` (its last apply)."""

    catalog_uri: str
    baseline: VersionInfo
    matched_by: str  # "spec_digest", or "managed_namespaces" when the spec changed since
    latest: int
    objects: list[Drifted] = field(default_factory=list)

    @property
    def has_drift(self) -> bool:
        return bool(self.objects)

    def to_dict(self) -> dict[str, Any]:
        return {"catalog": self.catalog_uri, "latest_version": self.latest,
                "baseline": {**_version_dict(self.baseline), "matched_by": self.matched_by},
                "has_drift": self.has_drift, "objects": [o.to_dict() for o in self.objects]}

    def render_text(self, color: bool) -> str:
        """The drifted objects as plan-style changes, each followed by the versions that
        made it, then a one-line verdict."""
        base = self.baseline
        how = ("its last apply" if self.matched_by == "spec_digest" else
               "the last apply to its namespaces; the spec changed since")
        commit = base.info.get("git_commit")
        lines = [f"Drift of {self.catalog_uri} since version {base.version} ({how}, "
                 f"{format_millis(base.created_at_millis)}"
                 + (f", git commit {commit}" if commit else "") + ")."]
        for item in self.objects:
            lines += ["", *change_lines(item.change.change, color)]
            for v in item.versions:
                lines.append(f"      changed in version {v.version} at "
                             f"{format_millis(v.created_at_millis)}" + _by(v))
        lines.append("")
        verdict = (f"{len(self.objects)} managed objects changed outside the spec."
                   if self.objects else "No drift: nothing the spec manages changed since.")
        lines.append(paint(verdict, "bold", color))
        return "\n".join(lines)


def _by(v: VersionInfo) -> str:
    info = v.info
    if not info:
        return " (no annotations)"
    return " by " + ", ".join(f"{k}={info[k]}" for k in sorted(info))


def _version_dict(v: VersionInfo) -> dict[str, Any]:
    return {"version": v.version, "created_at": format_millis(v.created_at_millis),
            "created_at_millis": v.created_at_millis, "info": v.info}


def find_drift(catalog: Catalog, spec: Spec) -> DriftReport:
    """Objects ``spec`` manages that changed since its last apply, with who changed them.

    Reads one root per version back to the last apply (newest first), then the definitions
    of the objects that differ.

    Raises:
        InvalidArgumentError: no retained version records an apply of the spec or of any
            namespace it manages.
    """
    latest = catalog.refresh()
    scope = Scope.of(spec)
    managed = set(scope.managed(catalog.snapshot))
    later: list[VersionInfo] = []  # versions after the baseline, newest first
    fallback: tuple[VersionInfo, list[VersionInfo]] | None = None
    baseline, matched_by = None, "spec_digest"
    for version in range(latest, catalog.files.oldest_version() - 1, -1):
        try:
            info = version_info(catalog.at_version(version))
        except OlympiaError:
            break  # expired since we listed: nothing older is readable either
        if info.info.get("tool") == APPLY_TOOL:
            if info.info.get("spec_digest") == spec.digest:
                baseline = info
                break
            if fallback is None and _touches(info, managed):
                fallback = (info, list(later))
        later.append(info)
    if baseline is None:
        if fallback is None:
            raise InvalidArgumentError(
                f"no version of {catalog.uri} records an apply of this spec (digest "
                f"{spec.digest[:12]}) or of the namespaces it manages; apply it first")
        (baseline, later), matched_by = fallback, "managed_namespaces"
    managed |= set(scope.managed(catalog.at_version(baseline.version)))

    def within(ref: ObjectRef) -> bool:
        return ref.namespace in managed

    diff = version_diff(catalog, baseline.version, latest, within)
    report = DriftReport(catalog.uri, baseline, matched_by, latest)
    for item in diff.changes:
        names = {item.ref} | ({item.source} if item.source else set())
        made = [v for v in reversed(later) if _writes(v, names)]
        report.objects.append(Drifted(item, made))
    return report


def _touches(info: VersionInfo, managed: set[str]) -> bool:
    return any(r.namespace in managed for a in info.changes() for r in actions.written(a)
               if r.type != ObjectType.CATALOG)


def _writes(info: VersionInfo, names: set[ObjectRef]) -> bool:
    """Whether a version wrote any of ``names`` (a rollback writes everything)."""
    if info.rollback is not None:
        return True
    return any(actions.written(a) & names for a in info.changes())
