"""YAML documents as plain data, with the file:line:col of every value and key in them.

Scalars follow the YAML 1.2 core schema rather than PyYAML's YAML 1.1 default: only
``true``/``false`` are booleans (``NO``, ``on``, ``yes`` stay strings), only ``~``/``null``
/empty is null, integers are decimal (``012`` stays a string), and dates stay strings.
Mapping keys are always their source text (a table named ``on`` or ``1`` keeps its name).

Files are untrusted input: only regular files of at most MAX_FILE_BYTES are read, characters
YAML forbids end a file with their position, a document may expand (aliases counted at
their expanded size) to at most MAX_EXPANDED_CHARS characters of values and keys, and
messages quote values only as short excerpts.

One module, over 400 lines, on purpose: the positions, the scalar rules and the bounds on
expansion are one parser's state; a split would only move its halves apart.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import re
import reprlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from olympia.exceptions import InvalidArgumentError
from olympia.inputs import MIB, read_user_file

Path_ = tuple[str | int, ...]
# (text, position, problems, in_key) -> text with variables expanded (in a key: only escapes
# undone, a reference is a problem); problems go to the list given
Substitute = Callable[[str, "Position", list["Problem"], bool], str]
MAX_NODES = 2_000_000  # alias expansion guard ("billion laughs")
MAX_DEPTH = 100  # collections nested deeper are refused (libyaml composes on the C stack)
MAX_FILE_BYTES = 16 * MIB  # a spec or vars file (loading one takes ~130 bytes per byte)
MAX_EXPANDED_CHARS = 16 * MIB  # scalars and keys of one document, aliases expanded
EXCERPT_CHARS = 80  # the most of a value a message quotes
MAX_MESSAGE_CHARS = 1000  # a message built from other errors' text is cut to this
MAX_PROBLEMS = 1000  # of a file (YAML) or a document (schema); more end it
SPLICED = ("columns", "fields")  # lists whose list items are spliced into them
# what YAML forbids in a stream (everything else is printable): C0 controls but tab and
# line breaks, DEL, C1 controls but NEL, surrogates, U+FFFE and U+FFFF
_FORBIDDEN = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd"
                        "\U00010000-\U0010ffff]")
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = EXCERPT_CHARS
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4
_REPR.maxlevel = 2


def excerpt(value: Any) -> str:
    """``repr(value)`` cut to at most EXCERPT_CHARS characters (``...`` marks the cut), so a
    message never holds a whole large value; a string's repr is cut in its middle; mappings
    and lists in YAML's flow style (``{name: id, type: int8}``), as a spec writes them."""
    text = _flow(value) if isinstance(value, dict | list) else _REPR.repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS - 3] + "..."


def _flow(value: Any, depth: int = 0) -> str:
    """``value`` in YAML flow style, at most 4 items a collection and 2 levels deep."""
    if isinstance(value, dict | list):
        if depth >= 2:
            return "{...}" if isinstance(value, dict) else "[...]"
        if isinstance(value, dict):
            shown = [f"{_flow(k, 2)}: {_flow(v, depth + 1)}"
                     for k, v in itertools.islice(value.items(), 4)]
        else:
            shown = [_flow(v, depth + 1) for v in value[:4]]
        inner = ", ".join(shown + (["..."] if len(value) > 4 else []))
        return f"{{{inner}}}" if isinstance(value, dict) else f"[{inner}]"
    if isinstance(value, str):
        plain = re.fullmatch(r"[A-Za-z0-9_.()\-][A-Za-z0-9_.() \-]*", value[:EXCERPT_CHARS])
        return value[:EXCERPT_CHARS] if plain and value == value.strip() else (
            _REPR.repr(value))
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else (
        _REPR.repr(value))


@dataclass(frozen=True, order=True, slots=True)  # one per value of a spec: kept small
class Position:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True, order=True)
class Problem:
    """One error, sortable by where it is."""

    position: Position
    message: str

    def __post_init__(self) -> None:
        if len(self.message) > MAX_MESSAGE_CHARS:  # e.g. an error quoting a huge name
            object.__setattr__(self, "message", self.message[:MAX_MESSAGE_CHARS - 3] + "...")

    def __str__(self) -> str:
        return f"{self.position}: {self.message}"


class CoreLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema implicit types."""

    yaml_implicit_resolvers: dict[Any, Any] = {}


_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
CoreLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?[0-9]+[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))
CoreLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])


class CoreDumper(yaml.SafeDumper):
    """Writes YAML that reads back the same under both YAML 1.1 and :class:`CoreLoader`: a
    string either would take for another type is quoted; multi-line strings are blocks."""


for _first, _resolvers in CoreLoader.yaml_implicit_resolvers.items():
    for _tag, _regexp in _resolvers:
        CoreDumper.add_implicit_resolver(_tag, _regexp, [_first])


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


CoreDumper.add_representer(str, _represent_str)


def dump(data: Any) -> str:
    """``data`` as YAML (keys in the order given) that :func:`load_documents` reads back."""
    return yaml.dump(data, Dumper=CoreDumper, sort_keys=False, allow_unicode=True, width=100)


def _fast_loader() -> type:
    """CoreLoader on libyaml's parser (several times faster), when PyYAML has libyaml."""
    if not yaml.__with_libyaml__:
        return CoreLoader
    from yaml.cyaml import CParser  # type: ignore[attr-defined]

    class FastCoreLoader(CParser, yaml.constructor.SafeConstructor,
                         yaml.resolver.Resolver):
        yaml_implicit_resolvers = CoreLoader.yaml_implicit_resolvers

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    return FastCoreLoader


@dataclass
class Document:
    """One YAML document: its data, where each value and key came from, and the source text
    of plain scalars (so ``tier: 1.10`` can be kept as the string ``1.10``)."""

    file: str
    data: Any
    positions: dict[Path_, Position] = field(default_factory=dict)
    key_positions: dict[Path_, Position] = field(default_factory=dict)
    plain_text: dict[Path_, str] = field(default_factory=dict)
    unreadable: set[Path_] = field(default_factory=set)  # values already reported as problems

    def at(self, path: Path_) -> Position:
        """The position of ``path``'s value, or of its nearest ancestor that has one."""
        while path not in self.positions and path:
            path = path[:-1]
        return self.positions.get(path, Position(self.file, 1, 1))

    def at_key(self, path: Path_) -> Position:
        """The position of the mapping key that ends ``path`` (else of its value)."""
        return self.key_positions.get(path) or self.at(path)

    def text(self, path: Path_) -> str:
        """A scalar as text: plain scalars as written, quoted ones as their string."""
        if path in self.plain_text:
            return self.plain_text[path]
        value = self.get(path)
        return "true" if value is True else "false" if value is False else str(value)

    def get(self, path: Path_) -> Any:
        value = self.data
        for part in path:
            value = value[part]
        return value


_GC_LOCK = threading.Lock()
_gc_holders = 0  # callers inside gc_paused()
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building a large tree of objects (a
    10k-object spec is millions of them): every collection would walk the whole tree built
    so far, and almost none of it is garbage. Nested and concurrent uses pause it once; the
    last to leave restores what it was."""
    global _gc_holders, _gc_was_enabled
    with _GC_LOCK:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


def _pos(node: yaml.Node, file: str) -> Position:
    return Position(file, node.start_mark.line + 1, node.start_mark.column + 1)


class _Converter:
    """Turns a composed node tree into plain data, recording positions and problems."""

    def __init__(self, file: str, substitute: Substitute | None,
                 problems: list[Problem]) -> None:
        self.file = file
        self.substitute = substitute
        self.problems = problems
        self.known = len(problems)  # problems of earlier files
        self.loader = CoreLoader("")
        self.nodes = 0
        self.chars = 0  # of scalars and keys converted, aliases counted every time

    def count(self, text: str, node: yaml.Node) -> None:
        """Count ``text`` (of ``node``) into the document's expanded size."""
        self.chars += len(text)
        if self.chars > MAX_EXPANDED_CHARS:
            raise _TooLarge(node, f"more than {MAX_EXPANDED_CHARS:,} characters of "
                            "values and keys after expanding aliases")

    def document(self, node: yaml.Node) -> Document:
        doc = Document(self.file, None)
        doc.data = self.convert(node, (), doc, {})
        return doc

    def problem(self, node: yaml.Node, message: str, doc: Document | None = None,
                path: Path_ = ()) -> None:
        self.problems.append(Problem(_pos(node, self.file), message))
        if doc is not None:
            doc.unreadable.add(path)
        self.check_problems(node)

    def check_problems(self, node: yaml.Node) -> None:
        """End the file at ``node`` once it has more than MAX_PROBLEMS problems."""
        if len(self.problems) - self.known > MAX_PROBLEMS:
            raise _TooLarge(node, f"more than {MAX_PROBLEMS} problems in this file; the rest "
                                  "are not checked")

    def grow(self, node: yaml.Node, count: int) -> None:
        """Count ``count`` more values (of ``node``) into the document's expanded size."""
        self.nodes += count
        if self.nodes > MAX_NODES:
            raise _TooLarge(node, f"more than {MAX_NODES} values after expanding aliases")

    def convert(self, node: yaml.Node, path: Path_, doc: Document,
                active: dict[int, Path_]) -> Any:
        """``active``: the collections being converted (id -> path), to catch alias cycles."""
        self.nodes += 1  # grow() and check_problems(), inline: this runs for every value
        if self.nodes > MAX_NODES or len(self.problems) - self.known > MAX_PROBLEMS:
            self.grow(node, 0)
            self.check_problems(node)
        mark = node.start_mark
        doc.positions[path] = Position(self.file, mark.line + 1, mark.column + 1)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path, doc)
        if id(node) in active:
            self.problem(node, "an alias refers to the collection that contains it", doc,
                         active[id(node)])
            return None
        if len(path) >= MAX_DEPTH:  # only aliases get here: composed nodes were checked
            self.problem(node, TOO_DEEP, doc, path)
            return None
        active = {**active, id(node): path}
        if isinstance(node, yaml.SequenceNode):
            items = (self.spliced(node, active) if path and path[-1] in SPLICED
                     else node.value)
            return [self.convert(item, (*path, i), doc, active) for i, item in enumerate(items)]
        assert isinstance(node, yaml.MappingNode)
        out: dict[str, Any] = {}
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(key_node, "mapping keys must be plain names, not collections")
                continue
            key = key_node.value
            self.count(key, key_node)
            if key == "<<" and not key_node.style:
                merged += self.merged(value_node, active)
                continue
            if "${var." in key and self.substitute is not None:
                key = self.substitute(key, _pos(key_node, self.file), self.problems, True)
            if key in out:
                first = doc.key_positions[(*path, key)]
                self.problem(key_node, f"duplicate key {excerpt(key)} (first at line "
                                       f"{first.line})")
                continue
            doc.key_positions[(*path, key)] = _pos(key_node, self.file)
            out[key] = self.convert(value_node, (*path, key), doc, active)
        for key_node, value_node in merged:  # keys written here win over merged ones
            key = key_node.value
            if key not in out:
                doc.key_positions[(*path, key)] = _pos(key_node, self.file)
                out[key] = self.convert(value_node, (*path, key), doc, active)
        return out

    def merged(self, node: yaml.Node, active: dict[int, Path_],
               ) -> list[tuple[yaml.Node, yaml.Node]]:
        """The key and value nodes a merge key (``<<: *base`` or ``<<: [*a, *b]``) brings
        in, the first mapping's first: they keep the positions where they are written."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out: list[tuple[yaml.Node, yaml.Node]] = []
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                self.problem(source, "a merge key (<<) takes a mapping or a list of mappings, "
                                     "e.g. <<: *defaults")
            elif id(source) in active:
                self.problem(source, "an alias refers to the collection that contains it")
            else:
                self.grow(source, len(source.value))
                nested = []
                for key, value in source.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == "<<" and not key.style:
                        nested.append(value)  # a merge inside the merged mapping
                    else:
                        out.append((key, value))
                for value in nested:
                    out += self.merged(value, {**active, id(source): ()})
        return out

    def spliced(self, node: yaml.SequenceNode, active: dict[int, Path_],
                ) -> list[yaml.Node]:
        """The items of a list of columns or fields, a list inside it (``[*common, {name:
        x, ...}]``) spliced in place, recursively: a column is never a list."""
        out: list[yaml.Node] = []
        for item in node.value:
            if not isinstance(item, yaml.SequenceNode):
                out.append(item)
            elif id(item) in active:
                self.problem(item, "an alias refers to the collection that contains it")
            else:
                self.grow(item, len(item.value))
                out += self.spliced(item, {**active, id(item): ()})
        return out

    def scalar(self, node: yaml.ScalarNode, path: Path_, doc: Document) -> Any:
        plain = not node.style  # None (or "" from libyaml) for plain scalars
        text = node.value
        if self.substitute is not None and "${var." in text:
            text = self.substitute(text, doc.positions[path], self.problems, False)
            # an unquoted value that expands to true/false is a boolean (protected: ${var.p});
            # anything else is text, as every other value of a spec is
            tag = "bool" if plain and _BOOL.match(text) else "str"
            node = yaml.ScalarNode(f"tag:yaml.org,2002:{tag}", text, node.start_mark,
                                   node.end_mark, style=node.style)
        self.count(text, node)
        if node.tag == _STR:
            return text  # what the constructor gives a string, without its bookkeeping
        try:
            value = self.loader.construct_object(node)
        except yaml.constructor.ConstructorError as exc:
            self.problem(node, f"cannot read this value: {exc.problem}", doc, path)
            return None
        except (ValueError, LookupError, TypeError, AttributeError):  # !!timestamp abc
            if plain and _INT.match(text):  # more digits than int() converts: the text, as
                return text  # a number kept as written would be
            self.problem(node, f"cannot read this value as {node.tag.rsplit(':', 1)[-1]}: "
                               f"{excerpt(text)}", doc, path)
            return None
        if plain and not isinstance(value, str) and value is not None:
            doc.plain_text[path] = text  # properties keep numbers and booleans as written
        return value


_STR = "tag:yaml.org,2002:str"


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    pass


TOO_DEEP = f"collections nested more than {MAX_DEPTH} levels deep"


def _check_stream(text: str) -> None:
    """Raise _TooDeep at the first collection nested deeper than MAX_DEPTH, and _TooLarge at
    the value that makes the stream hold more than MAX_NODES, before anything composes the
    stream (libyaml's composer recurses on the C stack, and every value composed takes
    memory)."""
    depth = 0
    nodes = 0
    parser = _LOADER(text)  # its events without yaml.parse()'s generator: this sees them all
    try:
        while (event := parser.get_event()) is not None:
            if isinstance(event, yaml.NodeEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise _TooLarge(event, f"more than {MAX_NODES} values")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _TooDeep(event)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        parser.dispose()


_LOADER = _fast_loader()


def _offset_position(text: str, offset: int, file: str) -> Position:
    """The line and column of the character at ``offset`` in ``text``."""
    line_start = text.rfind("\n", 0, offset) + 1
    return Position(file, text.count("\n", 0, offset) + 1, offset - line_start + 1)


def read_text(path: str | Path, problems: list[Problem]) -> str | None:
    """The text of the spec or vars file ``path``, or None with a problem when it is not a
    regular file, is larger than MAX_FILE_BYTES, cannot be read or is not UTF-8 (at the first
    byte that is not)."""
    file = str(path)
    try:
        data = read_user_file(path, MAX_FILE_BYTES)
    except InvalidArgumentError as exc:
        problems.append(Problem(Position(file, 1, 1), f"cannot read: {exc}"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8")
        problems.append(Problem(_offset_position(before, len(before), file),
                                f"not UTF-8 text: byte 0x{data[exc.start]:02x}"))
        return None


def load_documents(text: str, file: str, substitute: Substitute | None,
                   problems: list[Problem]) -> list[Document]:
    """Parse every document of a YAML stream (empty documents are skipped).

    Problems (invalid YAML, duplicate keys, undefined variables...) are appended to
    ``problems``; a character YAML forbids, a syntax error or too deep nesting ends the
    file, a document too large once expanded ends it from that document on; other problems
    do not.
    """
    forbidden = _FORBIDDEN.search(text)
    if forbidden:
        code = ord(forbidden.group())
        problems.append(Problem(
            _offset_position(text, forbidden.start(), file),
            f"character U+{code:04X} is not allowed in YAML (no control characters but tab "
            f"and line breaks, no U+FFFE or U+FFFF); in a double-quoted string write it as "
            f"the escape \\u{code:04x}"))
        return []
    converter = _Converter(file, substitute, problems)
    docs = []
    try:
        try:
            _check_stream(text)
            nodes = list(yaml.compose_all(text, Loader=_LOADER))
        except yaml.MarkedYAMLError:
            if _LOADER is CoreLoader:
                raise
            nodes = list(yaml.compose_all(text, Loader=CoreLoader))  # its messages are clearer
        for node in nodes:
            if node is not None:
                docs.append(converter.document(node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Position(file, mark.line + 1, mark.column + 1) if mark else Position(file, 1, 1)
        problems.append(Problem(where, f"invalid YAML: {exc.problem or exc.context}"))
    except _TooLarge as exc:
        problems.append(Problem(_pos(exc.args[0], file), exc.args[1]))
    except _TooDeep as exc:
        problems.append(Problem(_pos(exc.args[0], file), TOO_DEEP))
    return docs
