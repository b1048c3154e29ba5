"""Load a spec (a YAML file or a directory of them) into one validated desired state.

Every problem — invalid YAML, schema violations, unknown types, names the format forbids,
duplicates across files, views reading undeclared objects, contradictory rename hints,
undefined variables — is reported as ``file:line:col: message``, all at once, in one
SpecError.

One module, over 400 lines, on purpose: every check of a spec reports into one problem list with
positions, and splitting the builder would pass that list and the documents through every piece.
"""

from __future__ import annotations

import difflib
import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from olympia.catalog.keys import ObjectType, validate_name
from olympia.catalog.objects import Column, Namespace, Table, View, canonical_type
from olympia.exceptions import InvalidArgumentError, InvalidNameError, SpecError
from olympia.spec import fields as described
from olympia.spec import iceberg, schema
from olympia.spec import variables as spec_variables
from olympia.spec.model import Key, NamespaceSpec, Spec, TableSpec, ViewSpec
from olympia.spec.yamlpos import (
    Document,
    Path_,
    Position,
    Problem,
    Substitute,
    excerpt,
    gc_paused,
    load_documents,
    read_text,
)

DEFAULT_NAME_LIMIT = 100  # the format's default; plans check the catalog's own limits
SUFFIXES = (".yaml", ".yml")


def spec_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.yaml``/``*.yml`` under it outside hidden folders (any
    kind of file but a folder: reading one that is not a regular file is an error)."""
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and not p.is_dir()
                  and not any(part.startswith(".") for part in p.relative_to(path).parts))


def git_commit_of(path: str | Path) -> str:
    """The git commit checked out where the spec ``path`` is, with ``-dirty`` when the spec
    differs from it (uncommitted or untracked files); "" outside a git work tree or
    without git."""
    where = Path(path)
    folder = where if where.is_dir() else where.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--verify", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=all", "--",
                    "." if where.is_dir() else where.name)
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{head}-dirty" if dirty else head


def load_spec(path: str | Path, variables: Mapping[str, str] | None = None) -> Spec:
    """Read, validate and merge every document under ``path`` into one :class:`Spec`.

    ``variables`` give ``${var.NAME}`` values, over ``OLYMPIA_VAR_NAME`` from the
    environment. Raises SpecError listing every problem as ``file:line:col: message``.
    """
    root = Path(path)
    if not root.exists():
        raise SpecError([f"{root}: no such file or directory"])
    files = spec_files(root)
    if not files:
        raise SpecError([f"{root}: no .yaml or .yml files"])
    used: dict[str, str] = {}
    substitute = spec_variables.expander(spec_variables.collect(variables), used)
    builder = _Builder()
    digest = hashlib.sha256()
    with gc_paused():
        _load_files(root, files, substitute, builder, digest)
    if builder.problems:
        raise SpecError([str(p) for p in sorted(set(builder.problems))])
    for name, value in sorted(used.items()):
        digest.update(f"var\0{name}\0{value}\0".encode())
    spec = builder.spec
    spec.files = [str(f) for f in files]
    spec.digest = digest.hexdigest()
    return spec


def _load_files(root: Path, files: list[Path], substitute: Substitute,
                builder: _Builder, digest: hashlib._Hash) -> None:
    """Read, validate and merge ``files`` into ``builder``; their text into ``digest``."""
    for file in files:
        name = file.relative_to(root).as_posix() if root.is_dir() else file.name
        text = read_text(file, builder.problems)
        if text is None:
            continue
        digest.update(f"file\0{name}\0{text}\0".encode())
        for doc in load_documents(text, str(file), substitute, builder.problems):
            found = schema.violations(doc)
            builder.problems.extend(v.problem for v in found)
            part = _valid_part(doc, [*(v.path for v in found if not v.local),
                                     *doc.unreadable])
            if part is not None:
                builder.add(*part)
    builder.finish()


_OBJECTS = ("tables", "views")


def _valid_part(doc: Document, invalid: list[Path_]) -> tuple[Document, set[Path_]] | None:
    """What of ``doc`` can be checked further although the ``invalid`` paths (schema
    violations, unreadable values) are in it: ``doc`` without the top-level keys they are in,
    and the ``(kind, name)`` paths of the tables and views they are in, to be claimed but not
    built. None when they are in what everything else hangs on (the namespace, the
    document itself, or its tables or views mapping)."""
    if not invalid:
        return doc, set()
    dropped: set[str | int] = set()
    broken: set[Path_] = set()
    for path in invalid:
        if len(path) >= 2 and path[0] in _OBJECTS:
            broken.add(path[:2])
        elif path and path[0] not in ("namespace", *_OBJECTS):
            dropped.add(path[0])
        else:
            return None
    part = replace(doc, data={k: v for k, v in doc.data.items() if k not in dropped})
    rest = {k: {n: b for n, b in v.items() if (k, n) not in broken} if k in _OBJECTS else v
            for k, v in part.data.items()}
    still = [v for v in schema.violations(replace(doc, data=rest)) if not v.local]
    return None if still else (part, broken)


class _Builder:
    """Merges validated documents into a Spec, collecting cross-document problems."""

    def __init__(self) -> None:
        self.spec = Spec()
        self.problems: list[Problem] = []
        self.where: dict[Key, Position] = {}  # (ns, name) -> position of its key
        self.renames: dict[tuple[str, str, str], Position] = {}  # (kind, ns, old) -> where

    def problem(self, position: Position, message: str) -> None:
        self.problems.append(Problem(position, message))

    def _name(self, doc: Document, path: Path_, kind: ObjectType, name: str,
              key: bool) -> bool:
        try:
            validate_name(kind, name, DEFAULT_NAME_LIMIT)
            return True
        except InvalidNameError as exc:
            self.problem(doc.at_key(path) if key else doc.at(path), str(exc))
            return False

    def add(self, doc: Document, broken: set[Path_]) -> None:
        """Merge a schema-valid ``doc``; its ``broken`` tables and views (``(kind, name)``
        paths) only claim their names."""
        data = doc.data
        self.spec.manage.extend(data.get("manage", []))
        if "namespace" not in data:
            return
        ns = data["namespace"]
        if not self._name(doc, ("namespace",), ObjectType.NAMESPACE, ns, key=False):
            return
        if ns in self.spec.namespaces:
            first = self.spec.namespaces[ns].position
            self.problem(doc.at(("namespace",)), f"namespace {ns} is already declared at {first}")
            return
        old = self._rename_hint(doc, (), "namespace", "", ns)
        namespace = _definition(doc, (), Namespace, (ns,))
        self.spec.namespaces[ns] = NamespaceSpec(namespace, doc.at(("namespace",)), old)
        for kind, build in (("tables", self._table), ("views", self._view)):
            for name in data.get(kind) or {}:
                if (kind, name) in broken:
                    self._claim(doc, (kind, name), ns, name)
                else:
                    build(doc, ns, name)

    def _rename_hint(self, doc: Document, path: Path_, kind: str, ns: str,
                     name: str) -> str | None:
        old: str | None = doc.get(path).get("renamed_from")
        if old is None:
            return None
        where = doc.at((*path, "renamed_from"))
        if old == name:
            self.problem(where, f"renamed_from {excerpt(old)} is the {kind}'s own name")
            return None
        first = self.renames.get((kind, ns, old))
        if first is not None:
            self.problem(where, f"{kind} {_join(ns, old)} is already renamed at {first}")
            return None
        self.renames[(kind, ns, old)] = where
        return old

    def _claim(self, doc: Document, path: Path_, ns: str, name: str) -> bool:
        key = (ns, name)
        if key in self.where:
            self.problem(doc.at_key(path), f"{ns}.{name} is already declared at "
                                           f"{self.where[key]}")
            return False
        self.where[key] = doc.at_key(path)
        return True

    def _table(self, doc: Document, ns: str, name: str) -> None:
        path: Path_ = ("tables", name)
        if not (self._name(doc, path, ObjectType.TABLE, name, key=True)
                and self._claim(doc, path, ns, name)):
            return
        body: dict[str, Any] = doc.get(path)
        built = self._columns(doc, (*path, "columns"), top=True)
        old = self._rename_hint(doc, path, "table", ns, name)
        if built is None:
            return
        columns, renames = built
        table = _definition(doc, path, Table, (ns, name), columns=columns)
        layout = self._layout(doc, path, table)
        if layout is None:
            return
        managed = frozenset(f.name for f in described.kept_when_omitted(ObjectType.TABLE)
                            if f.key in body)
        self.spec.tables[(ns, name)] = TableSpec(
            table, doc.at_key(path), old, renames, managed, layout, body.get("format_version"))

    def _layout(self, doc: Document, path: Path_, table: Table) -> iceberg.Layout | None:
        """The partitioning and sorting of an Iceberg table, its columns checked for types
        Iceberg cannot hold; keys only Iceberg tables have are refused on other formats.
        None when something is wrong (reported)."""
        body: dict[str, Any] = doc.get(path)
        ok = True
        if table.format != "iceberg":
            for key in ("partition_by", "sort_by", "format_version"):
                if key in body:
                    self.problem(doc.at_key((*path, key)), f"{key} is for Iceberg tables; "
                                 f"this table's format is {table.format}")
                    ok = False
            return iceberg.Layout() if ok else None
        if "format_properties" in body:
            self.problem(doc.at_key((*path, "format_properties")),
                         "an Iceberg table's format properties are written by Iceberg: "
                         "declare format_version, partition_by and sort_by instead")
            ok = False
        for i, column in enumerate(table.columns):
            why = iceberg.unrepresentable(column)
            if why is not None:
                self.problem(doc.at((*path, "columns", i, "type")),
                             f"column {excerpt(column.name)}: {why} (the table's format is "
                             "iceberg; declare another format, or another type)")
                ok = False
        parsed: dict[str, list[Any]] = {"partition_by": [], "sort_by": []}
        for key, parse in (("partition_by", iceberg.parse_terms),
                           ("sort_by", iceberg.parse_sort)):
            items = body.get(key) or []
            for i, text in enumerate(items):
                if i and _split(items[i - 1]) and ")" in text and "(" not in text:
                    continue  # the rest of a term split at its comma (reported with it)
                try:
                    if _split(text):
                        raise InvalidArgumentError(
                            "a term with a comma was split by YAML flow syntax: quote it, "
                            'e.g. "bucket(16, id)", or write the list one item a line')
                    parsed[key] += parse([text], table.columns)
                except InvalidArgumentError as exc:
                    self.problem(doc.at((*path, key, i)), f"{key}: {exc}")
                    ok = False
        terms = parsed["partition_by"]
        for i, term in enumerate(terms):
            if term in terms[:i]:
                self.problem(doc.at((*path, "partition_by", i)),
                             f"partition_by: {term} appears twice")
                ok = False
        if not ok:
            return None
        return iceberg.Layout(tuple(terms), tuple(parsed["sort_by"]))

    def _view(self, doc: Document, ns: str, name: str) -> None:
        path: Path_ = ("views", name)
        if not (self._name(doc, path, ObjectType.VIEW, name, key=True)
                and self._claim(doc, path, ns, name)):
            return
        body: dict[str, Any] = doc.get(path)
        built = self._columns(doc, (*path, "columns"), top=False)
        old = self._rename_hint(doc, path, "view", ns, name)
        if built is None:
            return
        raw = body.get("references") or []
        references = tuple((r["namespace"], r["name"]) if isinstance(r, dict)
                           else tuple(r.split(".", 1)) for r in raw)
        view = _definition(doc, path, View, (ns, name), columns=built[0],
                           referenced_objects=references)
        positions = tuple(doc.at((*path, "references", i)) for i in range(len(raw)))
        self.spec.views[(ns, name)] = ViewSpec(view, doc.at_key(path), old, positions)

    # --- columns ---------------------------------------------------------------------------

    def _columns(self, doc: Document, path: Path_, top: bool,
                 ) -> tuple[tuple[Column, ...], dict[str, str]] | None:
        """Columns at ``path`` and their rename hints (new name -> old name)."""
        raw: list[dict[str, Any]] = doc.get(path) if path[-1] in doc.get(path[:-1]) else []
        columns: list[Column] = []
        renames: dict[str, str] = {}
        seen: dict[str, int] = {}
        ok = True
        for i, body in enumerate(raw):
            name = body["name"]
            if name in seen:
                self.problem(doc.at((*path, i, "name")), f"duplicate column {excerpt(name)} "
                                                         f"(also at {doc.at((*path, seen[name]))})")
                ok = False
            seen.setdefault(name, i)
            column = self._column(doc, (*path, i), name)
            ok = ok and column is not None
            if column is not None:
                columns.append(column)
            if top and "renamed_from" in body:
                renames[name] = body["renamed_from"]
        for i, body in enumerate(raw):
            old = body.get("renamed_from")
            if old is None:
                continue
            where = doc.at((*path, i, "renamed_from"))
            if old == body["name"]:
                self.problem(where, f"renamed_from {excerpt(old)} is the column's own name")
                ok = False
            elif old in seen:
                self.problem(where, f"renamed_from {excerpt(old)}: a column {excerpt(old)} is "
                                    "declared too; a renamed column's old name cannot stay")
                ok = False
            elif list(renames.values()).count(old) > 1:
                self.problem(where, f"column {excerpt(old)} is renamed twice")
                ok = False
        return (tuple(columns), renames) if ok else None

    def _column(self, doc: Document, path: Path_, name: str) -> Column | None:
        """One column (or struct field, list element, map key/value) at ``path``."""
        body: dict[str, Any] = doc.get(path)
        try:
            canonical_type(body["type"])
        except InvalidArgumentError:
            return None  # reported by the schema check, which accepts exactly the types read
        fields = []
        seen: set[str] = set()
        ok = True
        for i, item in enumerate(body.get("fields") or []):
            if item["name"] in seen:
                self.problem(doc.at((*path, "fields", i, "name")),
                             f"column {excerpt(name)}: duplicate field "
                             f"{excerpt(item['name'])}")
                ok = False
            seen.add(item["name"])
            field = self._column(doc, (*path, "fields", i), item["name"])
            ok = ok and field is not None
            fields.append(field)
        parts: dict[str, Column | None] = {}
        for part in ("element", "key", "value"):
            if part in body:
                parts[part] = self._column(doc, (*path, part), part)
                ok = ok and parts[part] is not None
        if not ok:
            return None
        try:
            return Column(name, body["type"], bool(body.get("nullable", True)),
                          body.get("comment", ""), tuple(f for f in fields if f is not None),
                          parts.get("element"), parts.get("key"), parts.get("value"),
                          _properties(doc, (*path, "properties")))
        except InvalidArgumentError as exc:
            self.problem(doc.at((*path, "type")), f"column {excerpt(name)}: {exc}")
            return None

    # --- checks across documents --------------------------------------------------------

    def declared(self, ns: str, name: str) -> bool:
        """Whether the spec declares a table or view ``ns.name``, valid or not."""
        return (ns, name) in self.where

    def finish(self) -> None:
        spec = self.spec
        for item in spec.namespaces.values():
            old = item.renamed_from
            if old is not None and old in spec.namespaces:
                self.problem(self.renames[("namespace", "", old)],
                             f"renamed_from {excerpt(old)}: namespace {old} is declared too; a "
                             "renamed namespace's old name cannot stay")
        for kind, items in (("table", spec.tables), ("view", spec.views)):
            for (ns, _), obj in items.items():
                old = obj.renamed_from
                if old is not None and self.declared(ns, old):
                    self.problem(self.renames[(kind, ns, old)],
                                 f"renamed_from {excerpt(old)}: {ns}.{old} is declared too; a "
                                 f"renamed {kind}'s old name cannot stay")
        self._moves()
        self._view_cycles()
        renamed_ns = {s.renamed_from: n for n, s in spec.namespaces.items() if s.renamed_from}
        renamed_obj = {(ns, s.renamed_from): name for items in (spec.tables, spec.views)
                       for (ns, name), s in items.items() if s.renamed_from}
        by_ns: dict[str, list[str]] = {}  # declared tables and views (for guesses)
        for (ns, name), view_spec in spec.views.items():
            refs = view_spec.view.referenced_objects
            for ref, where in zip(refs, view_spec.reference_positions, strict=True):
                ref_ns, ref_name = ref
                message = ""
                if ref == (ns, name):
                    message = "a view cannot read itself"
                elif ref_ns in renamed_ns:
                    message = (f"namespace {ref_ns} is renamed to {renamed_ns[ref_ns]} by this "
                               f"spec: reference {renamed_ns[ref_ns]}.{ref_name}")
                elif ref in renamed_obj:
                    message = (f"{ref_ns}.{ref_name} is renamed to {ref_ns}."
                               f"{renamed_obj[ref]} by this spec: reference the new name")
                elif ref_ns in spec.namespaces and not self.declared(ref_ns, ref_name):
                    if not by_ns:
                        for key_ns, key_name in self.where:
                            by_ns.setdefault(key_ns, []).append(key_name)
                    guess = difflib.get_close_matches(ref_name[:100], by_ns.get(ref_ns, []), n=1)
                    message = "the spec declares no such table or view" + (
                        f" (did you mean {ref_ns}.{guess[0]}?)" if guess else "")
                if message:
                    self.problem(where, f"view {ns}.{name} references {ref_ns}.{ref_name}: "
                                        f"{message}")

    def _moves(self) -> None:
        """A table's or view's ``renamed_from`` naming an object of another declared
        namespace: the format renames within a namespace only, so this is an error, not a
        silent drop and create."""
        spec = self.spec
        namespaces = spec.declared_namespaces()
        for kind, items in (("table", spec.tables), ("view", spec.views)):
            for (ns, name), obj in items.items():
                old = obj.renamed_from
                other = None if old is None else moved_from(old, namespaces - {ns})
                if old is not None and other is not None:
                    self.problem(self.renames[(kind, ns, old)],
                                 f"renamed_from {excerpt(old)}: moving {other[0]}.{other[1]} "
                                 f"to namespace {ns} is not supported (a rename stays in its "
                                 f"namespace); drop and create it, or keep {kind} "
                                 f"{ns}.{name} in {other[0]}")

    def _view_cycles(self) -> None:
        """Views of the spec reading each other in a circle: each cycle once, named whole at
        the reference that closes it."""
        views = self.spec.views
        graph = {k: [(r, w) for r, w in zip(v.view.referenced_objects, v.reference_positions,
                                            strict=True) if r in views and r != k]
                 for k, v in views.items()}
        state: dict[Key, bool] = {}  # True while on the path, False when done
        seen: set[frozenset[Key]] = set()
        for start in sorted(graph):
            if start in state:
                continue
            path, stack = [start], [iter(graph[start])]
            state[start] = True
            while stack:
                for ref, where in stack[-1]:
                    if state.get(ref):
                        cycle = path[path.index(ref):]
                        if frozenset(cycle) not in seen:
                            seen.add(frozenset(cycle))
                            names = " -> ".join(_join(*k) for k in (*cycle, ref))
                            self.problem(where, f"view {_join(*path[-1])} references "
                                         f"{_join(*ref)}: views read each other in a cycle "
                                         f"({names}); no order can create them")
                    elif ref not in state:
                        state[ref] = True
                        path.append(ref)
                        stack.append(iter(graph[ref]))
                        break
                else:
                    state[path.pop()] = False
                    stack.pop()


def moved_from(hint: str, namespaces: set[str]) -> tuple[str, str] | None:
    """``(namespace, name)`` when a rename hint names an object in one of ``namespaces``
    (``ingest.payments_raw``); None for a plain name."""
    for i, char in enumerate(hint):
        if char == "." and hint[:i] in namespaces and hint[i + 1:]:
            return hint[:i], hint[i + 1:]
    return None


def _definition(doc: Document, path: Path_, cls: type[described.D], key: tuple[str, ...],
                **built: Any) -> described.D:
    """The ``cls`` (Namespace, Table or View) named ``key`` the (schema-valid) body at
    ``path`` declares: each described field the spec sets, read as the catalog object holds it;
    ``built``: the fields read by the caller (columns, references)."""
    body: dict[str, Any] = doc.get(path)
    values = dict(built)
    for f in described.stored(described.KINDS[cls]):
        if f.compare == described.Compare.NAME or f.name in built:
            continue
        if f.compare == described.Compare.MAP:
            values[f.name] = _properties(doc, (*path, f.key))
        elif f.key in body:
            values[f.name] = body[f.key] if f.read is None else f.read(body[f.key])
    return described.build(cls, key, values)


def _properties(doc: Document, path: Path_) -> dict[str, str]:
    """A property map; scalars as written (``tier: 1.10`` is ``"1.10"``)."""
    parent = doc.get(path[:-1])
    if path[-1] not in parent or parent[path[-1]] is None:
        return {}
    return {key: doc.text((*path, key)) for key in parent[path[-1]]}


def _split(text: str) -> bool:
    """Whether a term was cut at its comma (``[bucket(16, id)]`` in flow syntax)."""
    return "(" in text and ")" not in text


def _join(ns: str, name: str) -> str:
    return f"{ns}.{name}" if ns else name
