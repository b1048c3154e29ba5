"""``${var.NAME}`` in spec values: where values come from, expansion and escaping.

Precedence, lowest first: the environment (``OLYMPIA_VAR_NAME``), vars files in the order
given, then explicit ``--var NAME=VALUE`` pairs. ``$${var.NAME}`` stands for the literal
text ``${var.NAME}``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from olympia.exceptions import SpecError
from olympia.spec.yamlpos import (
    Position,
    Problem,
    Substitute,
    excerpt,
    load_documents,
    read_text,
)

ENV_PREFIX = "OLYMPIA_VAR_"
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_REFERENCE = re.compile(r"\$(\$?)\{var\.(" + NAME + r")\}")
_LITERAL = re.compile(r"\$(\{var\." + NAME + r"\})")


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k[len(ENV_PREFIX):]: v for k, v in env.items() if k.startswith(ENV_PREFIX)}


def read_var_file(path: str | Path) -> dict[str, str]:
    """A YAML mapping of NAME: scalar; raises SpecError (file:line:col) when it is not one."""
    file = str(path)
    problems: list[Problem] = []
    text = read_text(path, problems)
    docs = [] if text is None else load_documents(text, file, None, problems)
    found: dict[str, str] = {}
    for doc in docs:
        if not isinstance(doc.data, dict):
            problems.append(Problem(doc.at(()), "a vars file is a mapping of NAME: value"))
            continue
        for name, value in doc.data.items():
            if not re.fullmatch(NAME, name):
                problems.append(Problem(doc.at_key((name,)), f"{excerpt(name)} is not a variable "
                                        "name (letters, digits and _, not starting with a "
                                        "digit)"))
            elif isinstance(value, dict | list) or value is None:
                problems.append(Problem(doc.at((name,)),
                                        f"variable {name} needs a scalar value"))
            else:
                found[name] = doc.text((name,))
    if problems:
        raise SpecError([str(p) for p in sorted(problems)])
    return found


def collect(explicit: Mapping[str, str] | None = None, files: Iterable[str | Path] = (),
            environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every variable's value: environment, then vars files, then ``explicit``."""
    found = from_environment(environ)
    for file in files:
        found.update(read_var_file(file))
    found.update({str(k): str(v) for k, v in (explicit or {}).items()})
    return found


def expander(variables: Mapping[str, str], used: dict[str, str]) -> Substitute:
    """A substitute function for :func:`load_documents`; names it expands go into ``used``.
    In keys, ``$${var.X}`` still stands for the literal text but references are errors."""

    def substitute(text: str, position: Position, problems: list[Problem], in_key: bool) -> str:
        def one(match: re.Match[str]) -> str:
            escaped, name = match.group(1), match.group(2)
            if escaped:
                return match.group(0)[1:]
            if in_key:
                problems.append(Problem(position, f"variables are allowed in values only, not "
                                        f"in the key {excerpt(text)}"))
            elif name not in variables:
                problems.append(Problem(position, f"undefined variable {excerpt(name)}: give --var "
                                        f"{name}=VALUE, a --var-file, or the environment "
                                        f"variable {ENV_PREFIX}{name}"))
            else:
                used[name] = variables[name]
                return variables[name]
            return match.group(0)

        return _REFERENCE.sub(one, text)

    return substitute


def escape(text: str) -> str:
    """The spec spelling of a literal string (``${var.X}`` -> ``$${var.X}``)."""
    return _LITERAL.sub(r"$$\1", text)
