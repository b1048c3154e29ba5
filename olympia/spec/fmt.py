"""``olympia fmt``: spec files in one layout, comments kept.

The formatter is conservative: it changes only what YAML gives no meaning to — line endings
(LF), whitespace at the ends of lines, runs of blank lines (at most one, none at the start
or end of a file), and the final newline — and never touches a line inside a multi-line
value (block scalars such as view SQL, and quoted values spanning lines). Comments,
indentation, key order and quoting stay as written. Every result is read back and compared
with the original: a file whose values would differ is left as it is (a SpecError).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from olympia.exceptions import SpecError
from olympia.spec.loader import spec_files
from olympia.spec.yamlpos import Problem, load_documents, read_text

_TRAILING = re.compile(r"[ \t]+$")
# libyaml's scanner when PyYAML has it: the one the loader reads with (PyYAML's own refuses
# some whitespace libyaml accepts, such as a tab after a value)
_SCANNER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def format_spec(path: str | Path, write: bool = True) -> list[str]:
    """Format every spec file under ``path`` (as :func:`load_spec` finds them).

    Returns:
        The files that changed (or, with ``write`` False, would change).

    Raises:
        SpecError: every problem of every file at once; then nothing is written.
    """
    root = Path(path)
    if not root.exists():
        raise SpecError([f"{root}: no such file or directory"])
    problems: list[Problem] = []
    changed: dict[Path, str] = {}
    failed: list[str] = []
    for file in spec_files(root):
        text = read_text(file, problems)
        if text is None:
            continue
        try:
            formatted = format_text(text, str(file))
        except SpecError as exc:
            failed += exc.problems
            continue
        if formatted != text:
            changed[file] = formatted
    if problems or failed:
        raise SpecError(sorted([str(p) for p in problems] + failed))
    for file, formatted in changed.items() if write else ():
        temporary = file.with_name(f".{file.name}.fmt-tmp")
        temporary.write_text(formatted, "utf-8", newline="")
        os.replace(temporary, file)
    return [str(f) for f in changed]


def format_text(text: str, file: str) -> str:
    """``text`` (the content of the spec file ``file``) formatted.

    Raises:
        SpecError: the file is not valid YAML (its problems as ``file:line:col``), or
            formatting would change a value (not expected; the file is then left alone).
    """
    problems: list[Problem] = []
    before = load_documents(text, file, None, problems)
    if problems:
        raise SpecError([str(p) for p in problems])
    text = text.replace("\r\n", "\n")
    try:
        spaces, inside = _value_lines(text)
    except yaml.YAMLError as exc:  # only PyYAML's own scanner, stricter than the loader's
        raise SpecError([f"{file}: cannot be formatted: {exc}"]) from None
    out: list[tuple[int, str]] = []  # (line number, text)
    for number, line in enumerate(text.split("\n")):
        if number not in spaces:
            line = _TRAILING.sub("", line)
        if number not in inside and not line and (not out or not out[-1][1]):
            continue  # at most one blank line, none first
        out.append((number, line))
    while out and not out[-1][1] and out[-1][0] not in inside:
        out.pop()
    formatted = "".join(f"{line}\n" for _, line in out)
    after = load_documents(formatted, file, None, problems)
    if problems or [d.data for d in after] != [d.data for d in before]:
        raise SpecError([f"{file}: formatting would change its values; left as it is"])
    return formatted


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
