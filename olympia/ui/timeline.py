"""The history page's timeline: commits per day as bars, rollbacks and exported versions
marked, the retention window (the versions expiry keeps) shaded; drawn as inline SVG by the
template, each bar and mark a link to its newest version on the page."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from olympia.ui.pages import HistoryPage

WIDTH, HEIGHT, MARGIN = 720, 140, 24


@dataclass
class Bar:
    """One day's commits."""

    x: float
    y: float
    width: float
    height: float
    day: str
    count: int
    version: int  # the day's newest version on the page (the bar links to it)


#: The kinds of marks, each on a row of its own (the y of its dot), so that a day with both
#: shows both: rollbacks on top, exports below.
MARK_ROWS = {"rollback": 8, "export": 20}


@dataclass
class Mark:
    """The rollbacks, or the exported versions, of one day: a dot on its kind's row and a
    line down to the axis (the template draws every line, then every dot: no line hides a
    dot)."""

    x: float
    y: int
    kind: str
    version: int  # the newest version marked (the mark links to it)
    what: list[str] = field(default_factory=list)


@dataclass
class Timeline:
    """What the SVG draws, in its coordinates."""

    width: int = WIDTH
    height: int = HEIGHT
    base: int = HEIGHT - MARGIN
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    kept_x: float | None = None
    first_day: str = ""
    last_day: str = ""
    most: int = 0


def _day(millis: int) -> date:
    return datetime.fromtimestamp(millis / 1000, UTC).date()


def timeline(page: HistoryPage) -> Timeline:
    """The timeline of the versions of ``page``, one slot per day from its oldest to its
    newest version's day."""
    if not page.entries:
        return Timeline()
    days = Counter(_day(e.created_at_millis) for e in page.entries)
    newest: dict[date, int] = {}
    for entry in page.entries:
        day = _day(entry.created_at_millis)
        newest[day] = max(newest.get(day, entry.version), entry.version)
    first, last = min(days), max(days)
    slots = (last - first).days + 1
    slot = (WIDTH - 2 * MARGIN) / slots
    most = max(days.values())
    usable = HEIGHT - 2 * MARGIN

    def x_of(day: date) -> float:
        return MARGIN + (day - first).days * slot

    bars = []
    for day, count in sorted(days.items()):
        height = usable * count / most
        bars.append(Bar(round(x_of(day) + slot * 0.1, 2), round(HEIGHT - MARGIN - height, 2),
                        round(max(slot * 0.8, 1.0), 2), round(height, 2), day.isoformat(),
                        count, newest[day]))
    exported: dict[int, list[str]] = {}
    for export in page.exports:
        exported.setdefault(export.version, []).append(export.name)
    marks: dict[tuple[str, float], Mark] = {}

    def mark(kind: str, centre: float, version: int, what: str) -> None:
        found = marks.setdefault((kind, centre), Mark(centre, MARK_ROWS[kind], kind, version))
        found.version = max(found.version, version)
        found.what.append(what)

    for entry in sorted(page.entries, key=lambda e: e.version):
        centre = round(x_of(_day(entry.created_at_millis)) + slot / 2, 2)
        if entry.is_rollback:
            mark("rollback", centre, entry.version, f"version {entry.version}: rollback of "
                 f"{entry.rollback[0]} to {entry.rollback[1]}" if entry.rollback
                 else f"version {entry.version}: rollback")
        if entry.version in exported:
            mark("export", centre, entry.version, f"version {entry.version}: exported as "
                 + ", ".join(sorted(exported[entry.version])))
    kept = _day(page.oldest_millis)
    kept_x = x_of(max(kept, first)) if kept <= last else None
    ordered = sorted(marks.values(), key=lambda m: (m.kind == "rollback", m.x))
    return Timeline(bars=bars, marks=ordered, kept_x=None if kept_x is None else round(kept_x, 2),
                    first_day=first.isoformat(), last_day=last.isoformat(),
                    most=most)
