"""``olympia fmt``: spec files in one canonical layout, comments kept.

The canonical form is the one ``olympia inspect`` writes, so inspected files are already
formatted:

* mappings indented by 2 spaces, list items (``-``) at the indentation of their key;
* the keys of namespaces, tables, views, columns (fields and the parts of nested types) and
  view references in :data:`KEY_ORDER`; other keys (``x-`` keys, merge keys ``<<``) keep
  their places, and a key never moves ahead of an anchor it refers to;
* text quoted only where a YAML 1.1 or 1.2 reader would otherwise take it for another type
  (``'1'``, ``'yes'``, ``'false'``), or its characters need quotes; where quotes stay, the
  quote character and escapes written stay; values holding ``${var.`` keep their quotes;
* comments kept: a comment line is indented like the line after it, an end-of-line comment
  stays on its line;
* block scalars (view SQL), flow collections (``{name: id, type: bigint}``), anchors,
  aliases and merge keys kept as written (never expanded); plain values keep their spelling
  (``1.10``, ``012``, ``~``);
* LF line ends, no whitespace at line ends, at most one blank line in a row, none at the
  start or end, one final newline.

Files are read as the spec loader reads them (bounded, validated) and only a file it loads
without problems, of at most MAX_FORMAT_CHARS characters, is formatted. Every result is
loaded back and compared with the original: a file whose values would differ is left as it
is (a SpecError naming it).

One module, over 400 lines, on purpose: ruamel.yaml's layout, the key moves and the
whitespace pass are the rounds of one formatter, each working on the text the one before it
wrote; nothing else uses them.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.emitter import Emitter
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.resolver import VersionedResolver

from olympia.exceptions import InvalidArgumentError, SpecError
from olympia.inputs import MIB
from olympia.spec import fields as described
from olympia.spec.loader import spec_files
from olympia.spec.rewrite import replace_file
from olympia.spec.yamlpos import CoreLoader, Document, Problem, load_documents, read_text

_COLUMN = ("name", "renamed_from", "type", "nullable", "comment", "fields", "element", "key",
           "value", "properties")
KEY_ORDER: dict[str, tuple[str, ...]] = {
    **{kind.label: described.spec_keys(kind) for kind in described.FIELDS},
    "column": _COLUMN,
    "reference": ("namespace", "name"),
}
# ruamel.yaml reads and writes in pure Python (some 100 kB a second): a bound on the time
# one file takes
MAX_FORMAT_CHARS = 4 * MIB
ROUNDS = 3  # of formatting at most: a result the next round would change again is kept
WIDTH = 100  # where long plain text is folded, as inspect's writer folds it
_TRAILING = re.compile(r"[ \t]+$")
# libyaml's scanner when PyYAML has it: the one the loader reads with (PyYAML's own refuses
# some whitespace libyaml accepts, such as a tab after a value)
_SCANNER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML11 = yaml.resolver.Resolver()  # what PyYAML and other YAML 1.1 readers make of text
_CORE = CoreLoader("")  # what the spec loader makes of it
_STR = "tag:yaml.org,2002:str"
_EMPTY = re.compile("^$")


def format_spec(path: str | Path, write: bool = True) -> list[str]:
    """Format every spec file under ``path`` (as :func:`load_spec` finds them).

    The spec tree is ``path`` resolved, or for a file the folder it is named in: a file
    that links outside it is refused, one that links inside it is formatted through the
    link. A file is written as :func:`replace_file` writes, never when it is read-only.

    Returns:
        The files that changed (or, with ``write`` False, would change).

    Raises:
        InvalidArgumentError: files link outside the spec tree, or (``write``) files to
            change are read-only or cannot be written; each line names one.
        SpecError: every problem of every file at once; then nothing is written.
    """
    root = Path(path)
    if not root.exists():
        raise SpecError([f"{root}: no such file or directory"])
    tree = (root if root.is_dir() else root.absolute().parent).resolve()
    # realpath, not resolve: a link loop is left for read_text to report
    targets = {file: Path(os.path.realpath(file)) for file in spec_files(root)}
    outside = [f"{file}: links outside the spec tree {tree} (to {target}); not formatted"
               for file, target in targets.items() if not target.is_relative_to(tree)]
    if outside:
        raise InvalidArgumentError("\n".join(outside))
    problems: list[Problem] = []
    changed: dict[Path, tuple[Path, str]] = {}  # target: (file, its formatted text)
    failed: list[str] = []
    for file, target in targets.items():
        text = read_text(file, problems)
        if text is None:
            continue
        try:
            formatted = format_text(text, str(file))
        except SpecError as exc:
            failed += exc.problems
            continue
        if formatted != text:
            changed.setdefault(target, (file, formatted))
    if problems or failed:
        raise SpecError(sorted([str(p) for p in problems] + failed))
    if write:
        _write(changed)
    return [str(file) for file, _ in changed.values()]


def _write(changed: dict[Path, tuple[Path, str]]) -> None:
    """Write each target's formatted text, after checking none is read-only."""
    read_only = [f"{file}: is read-only; not formatted (make it writable first)"
                 for target, (file, _) in changed.items() if _read_only(target)]
    if read_only:
        raise InvalidArgumentError("\n".join(read_only))
    for target, (file, formatted) in changed.items():
        try:
            replace_file(target, formatted.encode("utf-8"))
        except OSError as exc:
            raise InvalidArgumentError(
                f"{file}: cannot be written: {exc.strerror or exc}") from None


def _read_only(path: Path) -> bool:
    """Whether ``path`` has no write permission bit, or this process may not write it (a
    superuser may write any file: the bits tell what its owner meant)."""
    return not os.stat(path).st_mode & 0o222 or not os.access(path, os.W_OK)


def format_text(text: str, file: str) -> str:
    """``text`` (the content of the spec file ``file``) in the canonical form.

    Raises:
        SpecError: the file is not valid YAML or breaks the loader's limits (its problems as
            ``file:line:col``), or formatting would change a value (not expected; the file
            is then left alone).
    """
    problems: list[Problem] = []
    before = load_documents(text, file, None, problems)  # first: its bounds and checks apply
    if problems:
        raise SpecError([str(p) for p in problems])
    if len(text) > MAX_FORMAT_CHARS:
        raise SpecError([f"{file}: {len(text):,} characters, more than fmt formats "
                         f"({MAX_FORMAT_CHARS:,}); split it into smaller files"])
    try:
        formatted = text.replace("\r\n", "\n")
        for _ in range(ROUNDS):  # until a round changes nothing (e.g. a moved |+ block
            last = _tidy(formatted)  # gains "...")
            formatted = _tidy(_as_written(last, _reorder(_layout(last))))
            if formatted == last:
                break
    except (yaml.YAMLError, YAMLError) as exc:  # readers stricter than the loader's
        mark = getattr(exc, "problem_mark", None) if isinstance(
            exc, yaml.MarkedYAMLError | MarkedYAMLError) else None
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        problem = getattr(exc, "problem", None) or exc
        raise SpecError([f"{where}: cannot be formatted: {problem}"]) from None
    after = load_documents(formatted, file, None, problems)
    if problems or _values(after) != _values(before):
        raise SpecError([f"{file}: formatting would change its values; left as it is"])
    return formatted


def _values(docs: list[Document]) -> list[tuple[Any, dict[Any, str]]]:
    """What a spec's documents declare: their data and plain numbers as written."""
    return [(d.data, d.plain_text) for d in docs]


# --- layout: ruamel.yaml writes the documents again, comments and all ---------------------

class _TextResolver(VersionedResolver):
    """Takes every plain scalar but the empty one (null) as text, so each is written back
    exactly as it was."""

    @property
    def versioned_resolver(self) -> dict[Any, Any]:
        return {"": [("tag:yaml.org,2002:null", _EMPTY)]}


class _Emitter(Emitter):
    """Plain where it was plain; quoted text unquoted when plain text reads back the same."""

    def choose_scalar_style(self) -> Any:
        event = self.event
        if self.analysis is None:
            self.analysis = self.analyze_scalar(event.value)
        if (event.style in ("'", '"') and _reads_as_text(event.value) and self._plain_fits()):
            return ""
        return super().choose_scalar_style()

    def _plain_fits(self) -> bool:
        analysis = self.analysis
        if self.simple_key_context and (analysis.empty or analysis.multiline):
            return False
        return bool(analysis.allow_flow_plain if self.flow_level
                    else analysis.allow_block_plain)


def _reads_as_text(value: str) -> bool:
    """Whether ``value`` written plain is read as the same text by the spec loader (no
    variable in it) and by a YAML 1.1 reader."""
    return "${var." not in value and all(
        resolver.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
        == _STR for resolver in (_CORE, _YAML11))


def _layout(text: str) -> str:
    """``text`` written again by ruamel.yaml in the canonical indentation and quoting."""
    writer = YAML(typ="rt")
    writer.Resolver = _TextResolver
    writer.Emitter = _Emitter
    writer.preserve_quotes = True
    writer.indent(mapping=2, sequence=2, offset=0)
    writer.width = WIDTH
    writer.allow_unicode = True
    documents = list(writer.load_all(text))
    if not documents or any(d is None for d in documents):
        return text  # a document of comments alone would lose them: the file keeps its layout
    out = io.StringIO()
    writer.dump_all(documents, out)
    return out.getvalue()


# --- key order: lines (block mappings) and slices (flow mappings) moved -------------------

@dataclass(frozen=True, order=True)
class _Mark:
    line: int  # 0-based, as yaml's marks
    column: int

    @classmethod
    def of(cls, mark: Any) -> _Mark:
        return cls(mark.line, mark.column)


@dataclass
class _Node:
    """A node of the event stream with its place in the text."""

    kind: str  # "scalar", "alias", "mapping" or "sequence"
    start: _Mark
    end: _Mark
    flow: bool = False
    style: str | None = None
    anchor: str | None = None
    text: str = ""  # of a scalar
    children: list[_Node] = field(default_factory=list)

    def pairs(self) -> list[tuple[_Node, _Node]]:
        return list(zip(self.children[::2], self.children[1::2], strict=True))

    def value(self, key: str) -> _Node | None:
        for k, v in self.pairs():
            if k.kind == "scalar" and k.text == key:
                return v
        return None


def _tree(text: str) -> list[_Node]:
    """The documents of ``text`` as _Node trees."""
    roots: list[_Node] = []
    stack: list[_Node] = []
    for event in yaml.parse(text, Loader=_SCANNER):
        node: _Node | None = None
        if isinstance(event, yaml.ScalarEvent):
            node = _Node("scalar", _Mark.of(event.start_mark), _Mark.of(event.end_mark),
                         style=event.style, anchor=event.anchor)
            node.text = event.value
        elif isinstance(event, yaml.AliasEvent):
            node = _Node("alias", _Mark.of(event.start_mark), _Mark.of(event.end_mark),
                         anchor=event.anchor)
        elif isinstance(event, yaml.CollectionStartEvent):
            node = _Node("mapping" if isinstance(event, yaml.MappingStartEvent) else "sequence",
                         _Mark.of(event.start_mark), _Mark.of(event.end_mark),
                         flow=bool(event.flow_style),
                         anchor=event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            stack.pop().end = _Mark.of(event.end_mark)
            continue
        if node is None:
            continue
        (stack[-1].children if stack else roots).append(node)
        if node.kind in ("mapping", "sequence"):
            stack.append(node)
    return roots


def _known(root: _Node) -> Iterator[tuple[_Node, str]]:
    """The mappings of a document whose keys have a canonical order, with their kind."""
    if root.kind != "mapping":
        return
    yield root, "namespace"
    for section, kind in (("tables", "table"), ("views", "view")):
        objects = root.value(section)
        for _, body in objects.pairs() if objects and objects.kind == "mapping" else ():
            if body.kind != "mapping":
                continue
            yield body, kind
            yield from _columns(body.value("columns"))
            references = body.value("references")
            if kind == "view" and references is not None and references.kind == "sequence":
                yield from ((item, "reference") for item in references.children
                            if item.kind == "mapping")


def _columns(node: _Node | None) -> Iterator[tuple[_Node, str]]:
    """The columns of a list of columns or fields (lists in it spliced), their nested types."""
    if node is None or node.kind != "sequence":
        return
    for item in node.children:
        if item.kind == "sequence":
            yield from _columns(item)
        elif item.kind == "mapping":
            yield from _type(item)


def _type(node: _Node) -> Iterator[tuple[_Node, str]]:
    yield node, "column"
    yield from _columns(node.value("fields"))
    for part in ("element", "key", "value"):
        sub = node.value(part)
        if sub is not None and sub.kind == "mapping":
            yield from _type(sub)


def _order(node: _Node, kind: str) -> list[int] | None:
    """The canonical order of ``node``'s items (indexes), or None when it is already in it.

    Known keys fill the places known keys hold, in KEY_ORDER; other keys keep theirs."""
    names = [k.text if k.kind == "scalar" else "" for k, _ in node.pairs()]
    rank = {name: i for i, name in enumerate(KEY_ORDER[kind])}
    known = [i for i, name in enumerate(names) if name in rank]
    wanted = iter(sorted(known, key=lambda i: rank[names[i]]))
    order = [next(wanted) if name in rank else i for i, name in enumerate(names)]
    return None if order == list(range(len(names))) else order


def _reorder(text: str) -> str:
    """``text`` (as ruamel.yaml wrote it) with known keys in their canonical order."""
    lines = text.split("\n")
    moves = [(node, order) for root in _tree(text) for node, kind in _known(root)
             if (order := _order(node, kind)) is not None and not node.anchor
             and _anchors_ok(node, order)]
    # measured before anything moves; a move keeps the lines around it where they are, so
    # block mappings move innermost first and flow mappings (within one line) before them
    blocks = [block for node, order in moves if not node.flow
              if (block := _Block.of(node, order, lines)) is not None]
    for node, order in moves:
        if node.flow and node.start.line == node.end.line:
            line = lines[node.start.line]
            lines[node.start.line] = (line[:node.start.column] + _flow_text(node, order, line)
                                      + line[node.end.column:])
    for block in sorted(blocks, key=lambda b: b.ends[-1] - b.starts[0]):
        block.move(lines)
    return "\n".join(lines)


def _flow_text(node: _Node, order: list[int], line: str) -> str:
    """A one-line flow mapping's text with its items in ``order``."""
    items = [line[k.start.column:v.end.column] for k, v in node.pairs()]
    return "{" + ", ".join(items[i] for i in order) + "}"


def _anchors_ok(node: _Node, order: list[int]) -> bool:
    """Whether moving ``node``'s items into ``order`` keeps every anchor before its aliases."""
    pairs = node.pairs()
    defined = [set(_anchors(k) + _anchors(v)) for k, v in pairs]
    used = [set(_aliases(k) + _aliases(v)) for k, v in pairs]
    place = {item: n for n, item in enumerate(order)}
    return all(not (used[j] & defined[i]) or place[i] < place[j]
               for i in range(len(pairs)) for j in range(len(pairs)) if i != j)


def _anchors(node: _Node) -> list[str]:
    own = [node.anchor] if node.anchor and node.kind != "alias" else []
    return own + [a for child in node.children for a in _anchors(child)]


def _aliases(node: _Node) -> list[str]:
    own = [node.anchor] if node.kind == "alias" and node.anchor else []
    return own + [a for child in node.children for a in _aliases(child)]


def _last_line(node: _Node, lines: list[str]) -> int:
    """The last line (0-based) of ``node``'s own text (a block scalar's trailing blank
    lines belong to it only when it keeps them, ``|+``)."""
    if node.kind in ("mapping", "sequence") and not node.flow:
        return max([node.start.line] + [_last_line(c, lines) for c in node.children])
    last = node.end.line
    if node.end.column == 0 and last > node.start.line:
        last -= 1
    if node.kind == "scalar" and node.style in ("|", ">"):
        indicator = lines[node.start.line][node.start.column:].split("#", 1)[0]
        if "+" not in indicator:
            while last > node.start.line and not lines[last].strip():
                last -= 1
    return last


@dataclass
class _Block:
    """A block mapping's items as runs of lines: each item with the comment and blank lines
    above it (the first item's stay where the mapping starts)."""

    order: list[int]
    column: int  # of its keys
    prefix: str  # of its first line up to the first key (indentation, "- ")
    key_lines: list[int]
    starts: list[int]
    ends: list[int]

    @classmethod
    def of(cls, node: _Node, order: list[int], lines: list[str]) -> _Block | None:
        """None when the mapping is not one key a line at one indentation (left as is)."""
        pairs = node.pairs()
        column = pairs[0][0].start.column
        key_lines = [k.start.line for k, _ in pairs]
        prefix = lines[key_lines[0]][:column]
        if (len(set(key_lines)) < len(key_lines) or prefix.strip(" -")
                or any(k.start.column != column for k, _ in pairs)
                or any(lines[n][:column].strip() for n in key_lines[1:])):
            return None
        ends = [_last_line(v, lines) for _, v in pairs]
        starts = [key_lines[0]] + [end + 1 for end in ends[:-1]]
        return cls(order, column, prefix, key_lines, starts, ends)

    def move(self, lines: list[str]) -> None:
        """Put the items in their order in ``lines``."""
        out: list[str] = []
        for position, index in enumerate(self.order):
            segment = lines[self.starts[index]:self.ends[index] + 1]
            at = self.key_lines[index] - self.starts[index]
            pad = self.prefix if position == 0 else " " * self.column
            segment[at] = pad + segment[at][self.column:]
            out += segment
        lines[self.starts[0]:self.ends[-1] + 1] = out


def _as_written(source: str, text: str) -> str:
    """``text`` with each quoted scalar spelled as in ``source``: escapes (``\\U0001F600``,
    ``\\x1F``) and line breaks are the writer's choice, ruamel.yaml would spell them its way.
    A spelling over several lines is kept where the scalar starts in the same column."""
    spellings: dict[tuple[str, str, int | None], str] = {}  # column None: any one-line one
    source_lines = source.split("\n")
    for first, last, style, value in _quoted(source):
        spelling = "\n".join(source_lines[first.line:last.line + 1])
        spelling = spelling[first.column:len(spelling) - len(source_lines[last.line])
                            + last.column]
        spellings.setdefault((style, value, first.column), spelling)
        if "\n" not in spelling:
            spellings.setdefault((style, value, None), spelling)
    for _ in range(ROUNDS):  # a spelling restored before a scalar moves its column
        lines = text.split("\n")
        for first, last, style, value in sorted(_quoted(text), key=lambda q: q[0],
                                                reverse=True):
            written = spellings.get((style, value, first.column))
            if written is None and first.line == last.line:
                written = spellings.get((style, value, None))
            if written is not None:
                lines[first.line:last.line + 1] = (
                    lines[first.line][:first.column] + written + lines[last.line][last.column:]
                ).split("\n")
        text, last_text = "\n".join(lines), text
        if text == last_text:
            break
    return text


def _quoted(text: str) -> Iterator[tuple[_Mark, _Mark, str, str]]:
    """The quoted scalars of ``text`` without an anchor or tag before them: where they start
    and end, their style and value."""
    lines = text.split("\n")
    for event in yaml.parse(text, Loader=_SCANNER):
        if not isinstance(event, yaml.ScalarEvent) or event.style not in ("'", '"'):
            continue
        first, last = _Mark.of(event.start_mark), _Mark.of(event.end_mark)
        if lines[first.line][first.column:first.column + 1] == event.style:
            yield first, last, event.style, event.value


# --- whitespace: line ends, blank lines, trailing spaces outside values -------------------

def _tidy(text: str) -> str:
    """``text`` with full-line comments indented like the next line, LF line ends, no
    trailing whitespace, at most one blank line in a row and none at the ends, and one
    final newline; lines inside multi-line values untouched."""
    spaces, inside = _value_lines(text)
    lines = text.split("\n")
    indent = ""
    for number in range(len(lines) - 1, -1, -1):
        line = lines[number]
        if number in inside or not line.strip():
            continue
        if line.lstrip().startswith("#"):
            lines[number] = indent + line.lstrip()
        else:
            indent = line[:len(line) - len(line.lstrip())]
    out: list[tuple[int, str]] = []  # (line number, text)
    for number, line in enumerate(lines):
        if number not in spaces:
            line = _TRAILING.sub("", line)
        if number not in inside and not line and (not out or not out[-1][1]):
            continue  # at most one blank line, none first
        out.append((number, line))
    while out and not out[-1][1] and out[-1][0] not in inside:
        out.pop()
    return "".join(f"{line}\n" for _, line in out)


def _value_lines(text: str) -> tuple[set[int], set[int]]:
    """Line numbers (0-based) of multi-line values: the lines whose trailing whitespace is
    part of a value, and the lines a value continues on (blank ones are line breaks)."""
    lines = text.split("\n")
    spaces: set[int] = set()
    inside: set[int] = set()
    for token in yaml.scan(text, Loader=_SCANNER):
        if not isinstance(token, yaml.ScalarToken):
            continue
        first, last = token.start_mark.line, token.end_mark.line
        if token.end_mark.column == 0 and last > first:
            last -= 1  # a block scalar ends at the start of the next line
        if token.style in ("|", ">"):
            indicator = lines[first][token.start_mark.column:].split("#", 1)[0]
            if "+" not in indicator:  # trailing blank lines are not part of the value
                while last > first and not lines[last].strip():
                    last -= 1
            spaces.update(range(first + 1, last + 1))
        elif token.style in ('"', "'"):
            spaces.update(range(first, last))  # a space before a break may be escaped
        inside.update(range(first + 1, last + 1))
    return spaces, inside
