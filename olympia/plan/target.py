"""Targeted plans (``--target KIND.NAME``): the changes to some objects and what they need.

A target is ``namespace.NS``, ``table.NS.NAME`` or ``view.NS.NAME``. Namespace and object
names may hold dots, so a part may be double-quoted (``table."raw.events".clicks``, a quote
inside written twice); an unquoted name is split where it names an object of the spec or the
catalog's managed namespaces, and is an error when several splits do.

A targeted plan holds the changes whose operations touch a target (a namespace target covers
the objects in it) plus what those strictly need: the creation (or rename) of the namespace
an object lives in, and of the objects a created or replaced view references. The same rule,
applied to a saved plan's operations alone, refuses any operation that is neither
(:meth:`TargetedScope.of_changes`). Its fingerprints cover only the covered objects, their
namespaces' own definitions and the namespaces the plan creates, renames or drops, so a
change to any other object does not make it stale.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from olympia.catalog.keys import ObjectType
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import InvalidArgumentError
from olympia.plan.changes import Change
from olympia.plan.ops import (
    Action,
    CreateIcebergTable,
    CreateNamespace,
    CreateTable,
    CreateView,
    Kind,
    NamespaceOp,
    ObjectOp,
    Op,
    RenameNamespace,
    RenameTable,
    RenameView,
    ViewOp,
)
from olympia.plan.state import Observed, Scope
from olympia.spec.model import Key

MAX_TARGET_CHARS = 8192  # a target longer than any name the format allows is refused
_KINDS = tuple(str(k) for k in Kind)


@dataclass(frozen=True, order=True)
class Target:
    """One object a plan is limited to; ``name`` is empty for a namespace."""

    kind: Kind
    namespace: str
    name: str = ""

    def __str__(self) -> str:
        parts = [self.namespace] + ([self.name] if self.name else [])
        return ".".join([str(self.kind), *(_quoted(p) for p in parts)])

    def covers(self, key: tuple[str, ...]) -> bool:
        """Whether ``key`` — ``(ns,)`` or ``(ns, name)`` — is this target or, for a
        namespace target, inside it."""
        if self.kind == Kind.NAMESPACE:
            return key[0] == self.namespace
        return key == (self.namespace, self.name)

    def to_dict(self) -> dict[str, str]:
        out = {"type": str(self.kind), "namespace": self.namespace}
        return out | ({"object_name": self.name} if self.name else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> Target:
        kind = Kind(data["type"])
        name = data.get("object_name", "")
        if (kind == Kind.NAMESPACE) != (name == ""):
            raise InvalidArgumentError(f"target {kind} {data['namespace']}: a namespace has no "
                                       "object_name, a table or view needs one")
        return cls(kind, data["namespace"], name)


def _quoted(part: str) -> str:
    return f'"{part.replace(chr(34), chr(34) * 2)}"' if ("." in part or '"' in part) else part


# --- parsing and resolving -----------------------------------------------------------------


def _segments(text: str) -> list[str]:
    """The dot-separated parts of ``text``, double-quoted ones taken whole.

    Raises:
        InvalidArgumentError: an empty part, an unclosed quote, or text after a quote.
    """
    parts, i = [], 0
    while True:
        if text.startswith('"', i):
            j, part = i + 1, []
            while True:
                end = text.find('"', j)
                if end < 0:
                    raise InvalidArgumentError("unclosed double quote")
                part.append(text[j:end])
                if not text.startswith('"', end + 1):
                    break
                part.append('"')
                j = end + 2
            parts.append("".join(part))
            i = end + 1
            if i < len(text) and text[i] != ".":
                raise InvalidArgumentError("a quoted part must be followed by '.' or end the "
                                           "target")
        else:
            end = text.find(".", i)
            end = len(text) if end < 0 else end
            if '"' in text[i:end]:
                raise InvalidArgumentError("a double quote may only open or close a part")
            parts.append(text[i:end])
            i = end
        if not parts[-1]:
            raise InvalidArgumentError("empty name part")
        if i >= len(text):
            return parts
        i += 1  # the dot
        if i == len(text):
            raise InvalidArgumentError("empty name part")


@dataclass(frozen=True)
class Known:
    """The names a target may resolve to: the spec's and the managed namespaces' objects."""

    namespaces: Collection[str]
    tables: Collection[Key]
    views: Collection[Key]

    def names(self, kind: Kind) -> list[Target]:
        if kind == Kind.NAMESPACE:
            return [Target(kind, n) for n in sorted(self.namespaces)]
        return [Target(kind, *k) for k in sorted(self.tables if kind == Kind.TABLE
                                                 else self.views)]


def resolve_targets(texts: Sequence[str], known: Known) -> list[Target]:
    """The targets ``texts`` name, sorted and without repeats.

    Raises:
        InvalidArgumentError: naming every target that is malformed, of an unknown kind,
            ambiguous, or names nothing the spec declares or the managed namespaces hold
            (with the closest known name when there is one).
    """
    found, problems = set(), []
    for text in texts:
        try:
            found.add(_resolve(text, known))
        except InvalidArgumentError as exc:
            shown = text if len(text) <= 200 else text[:200] + "..."
            problems.append(f"--target {shown}: {exc}")
    if problems:
        raise InvalidArgumentError("\n".join(problems))
    return sorted(found)


def _resolve(text: str, known: Known) -> Target:
    if len(text) > MAX_TARGET_CHARS:
        raise InvalidArgumentError(f"longer than {MAX_TARGET_CHARS} characters")
    kind_text, dot, rest = text.partition(".")
    if kind_text not in _KINDS:
        guess = difflib.get_close_matches(kind_text.lower()[:100], _KINDS, n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        raise InvalidArgumentError(f"unknown kind {kind_text!r}{hint}; write KIND.NAME with "
                                   f"KIND one of {', '.join(_KINDS)}")
    kind = Kind(kind_text)
    if not dot:
        raise InvalidArgumentError(f"no name: write {kind}.NAME")
    try:
        parts = _segments(rest)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"malformed name ({exc})") from None
    if kind == Kind.NAMESPACE:
        candidates = [Target(kind, ".".join(parts))]
    elif len(parts) < 2:
        raise InvalidArgumentError(f"a {kind} is named {kind}.NAMESPACE.NAME")
    else:
        candidates = [Target(kind, ".".join(parts[:i]), ".".join(parts[i:]))
                      for i in range(1, len(parts))]
    names = known.names(kind)
    existing = set(names)
    matches = [c for c in candidates if c in existing]
    if len(matches) > 1:
        raise InvalidArgumentError("ambiguous: " + " and ".join(str(m) for m in matches)
                                   + " both exist; quote the parts holding dots")
    if matches:
        return matches[0]
    plain = {".".join(filter(None, (t.namespace, t.name))): t for t in names}
    guess = difflib.get_close_matches(".".join(parts)[:200], list(plain), n=1)
    hint = f" (did you mean {plain[guess[0]]}?)" if guess else ""
    raise InvalidArgumentError(f"names no {kind} of the spec or of the namespaces it "
                               f"manages in the catalog{hint}")


# --- selection -----------------------------------------------------------------------------


def touched(op: Op) -> set[tuple[str, ...]]:
    """The objects ``op`` changes: ``(ns,)`` for namespaces, ``(ns, name)`` for tables and
    views; a rename changes its old and its new name."""
    if isinstance(op, NamespaceOp):
        return {(ns,) for ns in op.namespaces()}
    assert isinstance(op, ObjectOp)
    out: set[tuple[str, ...]] = {op.identifier}
    if isinstance(op, RenameTable | RenameView):
        out.add((op.identifier[0], op.new_name))
    return out


def _needed(ops: Iterable[Op]) -> tuple[set[str], set[Key]]:
    """The namespaces the object operations among ``ops`` change, and the objects their
    views reference: what must exist for them to apply."""
    namespaces: set[str] = set()
    objects: set[Key] = set()
    for op in ops:
        if isinstance(op, ObjectOp):
            namespaces.update(k[0] for k in touched(op))
        if isinstance(op, ViewOp):
            objects.update(op.definition.referenced_objects)
    return namespaces, objects


def _provides(op: Op, namespaces: set[str], objects: set[Key]) -> bool:
    """Whether ``op`` creates (or renames into place) one of ``namespaces`` or ``objects``."""
    match op:
        case CreateNamespace():
            return op.namespace in namespaces
        case RenameNamespace():
            return op.new_name in namespaces
        case CreateTable() | CreateIcebergTable() | CreateView():
            return op.identifier in objects
        case RenameTable() | RenameView():
            return (op.identifier[0], op.new_name) in objects
    return False


def _direct(op: Op, targets: Sequence[Target]) -> bool:
    return any(t.covers(k) for k in touched(op) for t in targets)


def select(changes: Sequence[Change], targets: Sequence[Target]) -> list[Change]:
    """The changes a targeted plan holds, in their order: those touching a target, then,
    until none is added, the creations and renames of what the selected ones need."""
    chosen = [_direct_change(c, targets) for c in changes]
    while True:
        namespaces, objects = _needed(op for c, keep in zip(changes, chosen, strict=True)
                                      if keep for op in c.ops)
        added = False
        for i, change in enumerate(changes):
            if not chosen[i] and change.action in (Action.CREATE, Action.RENAME) and any(
                    _provides(op, namespaces, objects) for op in change.ops):
                chosen[i] = added = True
        if not added:
            return [c for c, keep in zip(changes, chosen, strict=True) if keep]


def _direct_change(change: Change, targets: Sequence[Target]) -> bool:
    return any(_direct(op, targets) for op in change.ops)


# --- scope of a targeted plan -------------------------------------------------------------


@dataclass(frozen=True)
class TargetedScope(Scope):
    """A spec's scope limited to targets; ``whole``: namespaces fingerprinted with all their
    objects; ``objects``: the tables and views fingerprinted (derived from the plan's
    operations, never read from a saved plan)."""

    targets: tuple[Target, ...] = ()
    whole: frozenset[str] = frozenset()
    objects: frozenset[Key] = frozenset()

    @classmethod
    def of_changes(cls, scope: Scope, targets: Sequence[Target],
                   changes: Sequence[Change], where: str = "plan") -> TargetedScope:
        """``scope`` limited to ``targets``, covering what ``changes`` touch.

        Raises:
            InvalidArgumentError: an operation touches neither a target nor something a
                targeted operation needs (a forged saved plan), naming it.
        """
        ops = [op for c in changes for op in c.ops]
        allowed = [_direct(op, targets) for op in ops]
        while True:
            namespaces, objects = _needed(op for op, ok in zip(ops, allowed, strict=True)
                                          if ok)
            more = [not ok and _provides(op, namespaces, objects)
                    for op, ok in zip(ops, allowed, strict=True)]
            if not any(more):
                break
            allowed = [a or m for a, m in zip(allowed, more, strict=True)]
        flat = [(c, op) for c in changes for op in c.ops]
        outside = [pair for pair, ok in zip(flat, allowed, strict=True) if not ok]
        if outside:
            shown = ", ".join(str(t) for t in targets)
            raise InvalidArgumentError("\n".join(
                f"{where}: {change}: operation {op.op} changes "
                f"{' and '.join('.'.join(k) for k in sorted(touched(op)))}, outside the "
                f"plan's targets ({shown}) and what they need; re-plan"
                for change, op in outside[:10]))
        whole = {t.namespace for t in targets if t.kind == Kind.NAMESPACE}
        whole |= {k[0] for op in ops if isinstance(op, NamespaceOp) for k in touched(op)}
        keys = {k for op in ops if isinstance(op, ObjectOp) for k in touched(op)}
        keys |= {(t.namespace, t.name) for t in targets if t.kind != Kind.NAMESPACE}
        keys |= {r for op in ops if isinstance(op, ViewOp)
                 for r in op.definition.referenced_objects}
        return cls(scope.declared, scope.patterns, scope.references, tuple(sorted(targets)),
                   frozenset(whole), frozenset((k[0], k[1]) for k in keys))

    def observe(self, reader: CatalogReader) -> Observed:
        """As :meth:`Scope.observe`, with rows and references limited to what the targeted
        plan covers (the managed namespaces stay all of them, for the scope check)."""
        return self.narrow(reader, super().observe(reader))

    def narrow(self, reader: CatalogReader, observed: Observed) -> Observed:
        """``observed`` (of the untargeted scope) limited to what this plan covers."""
        spaces = {ns for ns, _ in self.objects}
        rows = {}
        for ns, items in observed.rows.items():
            if ns in self.whole:
                rows[ns] = items
            elif ns in spaces:
                rows[ns] = [(key, path) for key, path in items
                            if self._covers_row(reader, key)]
        references = {r: v for r, v in observed.references.items() if r in self.objects}
        return Observed(observed.managed, rows, references)

    def _covers_row(self, reader: CatalogReader, key: str) -> bool:
        ref = reader.codec.decode(key)
        if ref.type == ObjectType.NAMESPACE:
            return True  # the namespace's own definition, next to covered objects
        return (ref.namespace, ref.name) in self.objects

    def describe(self) -> str:
        """The line that says a plan is partial."""
        need = "what it needs" if len(self.targets) == 1 else "what they need"
        return (f"Targeted plan: only {', '.join(str(t) for t in self.targets)} and {need}; "
                "other changes in the spec are not shown.")


def targets_of(scope: Scope) -> tuple[Target, ...]:
    """The targets of a plan's scope; empty for a whole plan."""
    return scope.targets if isinstance(scope, TargetedScope) else ()
