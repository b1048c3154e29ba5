"""Plans as Markdown for pull-request comments: a summary table, destructive and refused
changes first, then one collapsible block per namespace with the changes as a diff."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

from olympia.plan.changes import Change
from olympia.plan.ops import Action, Kind, ObjectOp
from olympia.plan.plan import Plan
from olympia.plan.render import SIGNS, change_lines

# GitHub colours a diff block's lines by their first character: + green, - red, ! orange.
_DIFF_MARK = {"+": "+", "-": "-", "~": "!", "-/+": "!", "!": "!"}
_SIGNED = re.compile(r"^( *)(-/\+|[+~!-]) ")
_VERBS = (Action.CREATE, Action.UPDATE, Action.RENAME, Action.REPLACE, Action.DROP)


def render_markdown(plan: Plan) -> str:
    """The plan as GitHub-flavoured Markdown.

    Args:
        plan: a plan, made now or loaded from a saved file (its changes classified).

    Returns:
        The Markdown text, ending with a newline. Names and values from the spec are
        escaped (in code spans, HTML or fenced blocks), so a spec cannot inject markup.
    """
    summary = plan.summary_line().removeprefix("Plan: ")
    lines = [f"### Olympia plan: {_md(summary)}", ""]
    commit = f"spec commit {_code(plan.git_commit)}" if plan.git_commit else (
        "spec commit unknown")
    lines += [f"Catalog {_code(plan.catalog_uri)}, planned against version "
              f"**{plan.base_version}**; {commit}.", ""]
    if plan.partial_note:
        lines += [f"**{_md(plan.partial_note)}**", ""]
    warnings = _warnings(plan)
    if warnings:
        lines.append(warnings)
    if plan.changes:
        lines += [_table(plan.changes), ""]
    for namespace, changes in _by_namespace(plan.changes):
        counts = ", ".join(f"{n} to {verb}" for verb, n in _counts(changes).items() if n)
        lines += [f"<details><summary>namespace <code>{html.escape(namespace)}</code>: "
                  f"{counts}</summary>", "", *_fenced(_diff_lines(changes)), "", "</details>",
                  ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _warnings(plan: Plan) -> str:
    """Refused, destructive and other warnings, as GitHub alert blocks (empty: none)."""
    out = []
    if plan.blocked:
        out += ["> [!CAUTION]", "> **Refused: these changes touch protected objects** and "
                "cannot be applied with any option:"]
        out += [f"> - {c.kind} {_code(c.name)}: {_md(c.blocked)}" for c in plan.blocked]
        out.append("")
    destructive = [c for c in plan.changes if c.destructive]
    if destructive:
        out += ["> [!WARNING]", "> **Destructive changes**: applying needs "
                "`--allow-destructive`:"]
        out += [f"> - `{SIGNS[c.action]}` {c.kind} {_code(c.name)}: {_md('; '.join(c.reasons))}"
                for c in destructive]
        out.append("")
    if plan.warnings:
        out += ["> [!NOTE]", "> **Warnings:**"]
        out += [f"> - {_md(w)}" for w in plan.warnings]
        out.append("")
    return "\n".join(out)


def _counts(changes: Iterable[Change]) -> dict[str, int]:
    counts = {str(verb): 0 for verb in _VERBS}
    for change in changes:
        counts[str(change.action)] += 1
    return counts


def _table(changes: list[Change]) -> str:
    """Creates, updates, renames, replaces and drops per kind of object, and in total."""
    head = ["| | " + " | ".join(f"{v}" for v in _VERBS) + " |",
            "|---|" + "---:|" * len(_VERBS)]
    rows = []
    for kind in Kind:
        counts = _counts(c for c in changes if c.kind == kind)
        if any(counts.values()):
            rows.append(f"| {kind} | " + " | ".join(str(n) for n in counts.values()) + " |")
    total = _counts(changes)
    rows.append("| **total** | " + " | ".join(f"**{n}**" for n in total.values()) + " |")
    return "\n".join(head + rows)


def _namespace_of(change: Change) -> str:
    """The namespace a change belongs to: its operations name it (both namespace and
    object names may hold dots, so the combined name alone cannot tell)."""
    if change.kind == Kind.NAMESPACE:
        return change.name
    spaces = [op.identifier[0] for op in change.ops if isinstance(op, ObjectOp)]
    fits = [ns for ns in spaces if change.name.startswith(f"{ns}.")]
    return max(fits, key=len) if fits else change.name.rsplit(".", 1)[0]


def _by_namespace(changes: list[Change]) -> list[tuple[str, list[Change]]]:
    groups: dict[str, list[Change]] = {}
    for change in changes:
        groups.setdefault(_namespace_of(change), []).append(change)
    return sorted(groups.items())


def _diff_lines(changes: list[Change]) -> list[str]:
    """The plan's own text lines, each sign moved to the first column as a diff marker."""
    out = []
    for change in changes:
        block = " "  # the mark of the unsigned lines of a multi-line value (view SQL)
        for line in change_lines(change, on=False):
            match = _SIGNED.match(line)
            if match is None:  # a whole value added or removed (+/-), or unchanged context
                out.append(block + line[1:])
                continue
            indent, sign = match.groups()
            mark = _DIFF_MARK[sign]
            if line.endswith(":"):  # the head of a multi-line value ("+ sql:")
                block = mark if mark in "+-" else " "
            out.append(f"{mark}{indent}{line[len(indent) + len(sign):]}")
    return out


def _fenced(lines: list[str]) -> list[str]:
    """A ```diff block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}diff", *lines, fence]


def _code(text: str) -> str:
    """``text`` as an inline code span that no backtick inside can end early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~])")


def _md(text: str) -> str:
    """Plain text in Markdown: one line, every character Markdown or HTML gives meaning to
    escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))
