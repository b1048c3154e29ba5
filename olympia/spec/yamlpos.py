"""YAML documents as plain data plus the file:line:col of every value in them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

Path_ = tuple[str | int, ...]
_VAR = re.compile(r"\$\{var\.([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Position:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass
class Document:
    """One YAML document: its data and where each value (by path) and key came from."""

    file: str
    data: Any
    positions: dict[Path_, Position]
    key_positions: dict[Path_, Position]

    def at(self, path: Path_) -> Position:
        """The position of ``path``, or of its nearest ancestor that has one."""
        while path not in self.positions and path:
            path = path[:-1]
        return self.positions.get(path, Position(self.file, 1, 1))

    def at_key(self, path: Path_) -> Position:
        """The position of the mapping key that ends ``path``."""
        return self.key_positions.get(path) or self.at(path)


class YamlProblem(Exception):
    def __init__(self, position: Position, message: str) -> None:
        super().__init__(f"{position}: {message}")


def load_documents(text: str, file: str,
                   substitute: Callable[[str, Position], str] | None = None) -> list[Document]:
    """Parse every document of a YAML stream, keeping positions (1-based).

    Duplicate mapping keys are errors (YAML loaders usually keep the last silently).
    ``substitute`` rewrites scalar values (not keys), e.g. to expand variables.
    """
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        position = Position(file, mark.line + 1, mark.column + 1) if mark else Position(file, 1, 1)
        raise YamlProblem(position, f"invalid YAML: {exc.problem}") from None
    docs = []
    constructor = yaml.SafeLoader("")
    for node in nodes:
        if node is None:
            continue
        positions: dict[Path_, Position] = {}
        keys: dict[Path_, Position] = {}
        data = _convert(node, (), file, (positions, keys), substitute, constructor)
        docs.append(Document(file, data, positions, keys))
    return docs


def _pos(node: yaml.Node, file: str) -> Position:
    return Position(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _convert(node: yaml.Node, path: Path_, file: str,
             marks: tuple[dict[Path_, Position], dict[Path_, Position]],
             substitute: Callable[[str, Position], str] | None,
             constructor: yaml.SafeLoader) -> Any:
    positions, keys = marks
    positions[path] = _pos(node, file)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = str(constructor.construct_object(key_node, deep=True))
            if key in out:
                raise YamlProblem(_pos(key_node, file), f"duplicate key {key!r}")
            keys[(*path, key)] = _pos(key_node, file)
            out[key] = _convert(value_node, (*path, key), file, marks, substitute, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), file, marks, substitute, constructor)
                for i, item in enumerate(node.value)]
    assert isinstance(node, yaml.ScalarNode)
    value = constructor.construct_object(node)
    if isinstance(value, str) and substitute is not None:
        value = substitute(value, positions[path])
    return value


def expand_variables(variables: Mapping[str, str]) -> Callable[[str, Position], str]:
    """A substitute function replacing ``${var.NAME}``; unknown names are errors."""

    def substitute(text: str, position: Position) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in variables:
                raise YamlProblem(position, f"undefined variable {name!r} (give --var "
                                            f"{name}=VALUE, a vars file, or OLYMPIA_VAR_{name})")
            return variables[name]

        return _VAR.sub(one, text)

    return substitute

