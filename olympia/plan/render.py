"""Human-readable plans, in the style of Terraform: a sign per object, attribute-level
``before -> after`` lines, and a summary line."""

from __future__ import annotations

import difflib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from olympia.plan.changes import Change


class Changes(Protocol):
    """What can be rendered: a plan, or a rollback's changes."""

    @property
    def changes(self) -> Sequence[Change]: ...

    @property
    def warnings(self) -> Sequence[str]: ...

    def summary(self) -> dict[str, int]: ...


SIGNS = {"create": "+", "update": "~", "rename": "~", "replace": "-/+", "drop": "-"}
_COLOR_OF_SIGN = {"+": "green", "~": "yellow", "-": "red", "-/+": "magenta", "!": "red"}
_CODES = {"green": "32", "yellow": "33", "red": "31", "magenta": "35", "bold": "1"}
INDENT = "      "


def want_color(stream: Any = None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, color: str, enabled: bool) -> str:
    return f"\033[{_CODES[color]}m{text}\033[0m" if enabled else text


def summary_line(plan: Changes, empty: str = "No changes. The catalog matches the spec.",
                 ) -> str:
    if not plan.changes:
        return empty
    s = plan.summary()
    line = (f"Plan: {s['create']} to create, {s['update'] + s['rename']} to change, "
            f"{s['replace']} to replace, {s['drop']} to drop")
    notes = [f"{s['destructive']} destructive"] if s["destructive"] else []
    if s["blocked"]:
        notes.append(f"{s['blocked']} refused")
    return line + (f" ({', '.join(notes)})" if notes else "") + "."


def render(plan: Changes, title: str, color: bool | None = None,
           empty: str = "No changes. The catalog matches the spec.") -> str:
    """``title``, a line per change and its attribute changes, warnings, the summary line
    (``empty`` when there are no changes)."""
    on = want_color() if color is None else color
    lines = [title]
    if plan.changes:
        lines += ["Symbols: + create, ~ change, -/+ replace, - drop.", ""]
    for change in plan.changes:
        lines += change_lines(change, on)
    if plan.warnings:
        lines += ["", "Warnings:"]
        lines += [paint(f"  ! {w}", "red", on) for w in plan.warnings]
    if plan.changes:
        lines.append("")
    lines.append(paint(summary_line(plan, empty), "bold", on))
    return "\n".join(lines)


def change_lines(change: Change, on: bool) -> list[str]:
    """The lines of one change: its head (sign, kind, name), why it is refused, and its
    attribute changes; coloured when ``on``."""
    sign = SIGNS[change.action]
    head = f"{sign} {change.kind} {change.name}"
    if change.action == "rename":
        head += f" (renamed from {change.from_name})"
    elif change.action == "replace":
        head += " (must be replaced)"
    if change.destructive:
        head += "  [destructive]"
    lines = [paint(f"  {head}", _COLOR_OF_SIGN[sign], on)]
    if change.blocked:
        lines.append(paint(f"{INDENT}! refused: {change.blocked}", "red", on))
    for d in change.details:
        lines += [paint(text, _COLOR_OF_SIGN[s], on) for s, text in _detail_lines(d)]
    return lines


def _show(value: Any, raw: bool = False) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value if raw else json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v, raw=True) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _detail_lines(d: Mapping[str, Any], indent: str = INDENT) -> list[tuple[str, str]]:
    """(sign, text) lines of one attribute change; what changed inside a struct, list or
    map column (``nested``) as a block under it, each level indented further."""
    attr, before, after = d["attr"], d.get("before"), d.get("after")
    raw = bool(d.get("text"))  # type texts read better unquoted
    flag = "  [incompatible]" if d.get("incompatible") else ""
    if d.get("rename"):
        return [("~", f"{indent}~ {attr}: renamed to {after}")]
    multiline = any(isinstance(v, str) and "\n" in v.strip() for v in (before, after))
    if multiline:
        return _text_block(attr, before, after, indent)
    if before is None:
        out = [("+", f"{indent}+ {attr}: {_show(after, raw)}{flag}")]
    elif after is None:
        out = [("-", f"{indent}- {attr}: {_show(before, raw)}{flag}")]
    elif d.get("nested"):
        out = [("~", f"{indent}~ {attr}{flag}")]
    else:
        out = [("~", f"{indent}~ {attr}: {_show(before, raw)} -> {_show(after, raw)}{flag}")]
    for inner in d.get("nested") or ():
        out += _detail_lines(inner, indent + "    ")
    return out


def _text_block(attr: str, before: str | None, after: str | None, indent: str,
                ) -> list[tuple[str, str]]:
    """A multi-line value (view SQL) as a line diff."""
    old = (before or "").strip().splitlines()
    new = (after or "").strip().splitlines()
    sign = "+" if before is None else "-" if after is None else "~"
    out = [(sign, f"{indent}{sign} {attr}:")]
    for line in difflib.ndiff(old, new):
        tag, text = line[:1], line[2:]
        if tag == "?":
            continue
        if before is None or after is None:
            out.append((sign, f"{indent}    {text}"))
        else:
            out.append(({"-": "-", "+": "+"}.get(tag, "~"), f"{indent}  {tag or ' '} {text}"))
    return out
