"""Specs, vars files and saved plans are untrusted input: through the CLI, every crafted file
gives a clear error naming the file (and line and column for YAML), the documented exit
code and no traceback, within bounded memory and without blocking."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from plan_helpers import write_text

from olympia.cli import main
from olympia.spec import yamlpos
from olympia.spec.schema import MAX_TYPE_PARAMETER

ADDRESS_SPACE = 2 * 1024**3


def run(*args: str, tmp_path: Path | None = None) -> Result:
    env = {"OLYMPIA_CATALOG": str(tmp_path / "wh") if tmp_path else None, "NO_COLOR": "1",
           "OLYMPIA_GIT_COMMIT": None}
    result = CliRunner().invoke(main, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        "".join(traceback.format_exception(result.exception)))
    return result


def errors(result: Result, code: int = 3) -> list[str]:
    """The error lines of a command that failed with ``code``: one ``Error: `` line, the
    rest of a spec error's problems under it."""
    assert result.exit_code == code, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("Error: "), result.output
    return [lines[0].removeprefix("Error: "), *lines[1:]]


def table(column_type: str) -> str:
    return (f"namespace: s\ntables:\n  t:\n    columns:\n"
            f"      - {{name: c, type: \"{column_type}\"}}\n")


# --- expansion: bounded memory, excerpts -----------------------------------------------------


def alias_bomb(path: Path) -> Path:
    """About 1 MB: a 1 MB string, aliased through anchored lists to 10 GB, in a value of the
    wrong type (whose error message once held the whole expansion)."""
    lines = ["namespace: s", f"comment: &s {'A' * 1_000_000}",
             "l1: &l1 [" + ", ".join(["*s"] * 10) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in (2, 3)]
    lines.append("protected: [" + ", ".join(["*l3"] * 10) + "]")
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def test_alias_bomb_in_a_wrong_value_fails_cleanly_in_2_gb(tmp_path: Path) -> None:
    spec = alias_bomb(tmp_path / "bomb.yaml")
    script = Path(sys.executable).with_name("olympia")
    proc = subprocess.run([str(script), "validate", str(spec)], capture_output=True, text=True,
                          preexec_fn=_limit_address_space, timeout=300)
    assert (proc.returncode, proc.stdout) == (3, ""), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line == (f"Error: {spec}:2:10: more than 16,777,216 characters of values and keys "
                    "after expanding aliases")


def test_a_large_wrong_value_is_quoted_as_an_excerpt(tmp_path: Path) -> None:
    """Within the expansion limit, a wrong value of 10 MB is quoted in at most 80 characters."""
    spec = write_text(tmp_path, "a.yaml", "namespace: s\ncomment: &s " + "A" * 1_000_000
                      + "\nprotected: [" + ", ".join(["*s"] * 10) + "]\n")
    (problem,) = errors(run("validate", str(spec)))
    prefix = f"{spec}:3:12: protected: "
    assert problem.startswith(prefix) and problem.endswith(" is not of type 'boolean'")
    quoted = problem.removeprefix(prefix).removesuffix(" is not of type 'boolean'")
    assert quoted.startswith("[AAA") and len(quoted) == yamlpos.EXCERPT_CHARS


def test_a_huge_key_is_quoted_as_an_excerpt(tmp_path: Path) -> None:
    key = "k" * 100_000
    spec = write_text(tmp_path, "a.yaml", f"namespace: s\n? {key}\n: 1\n")
    (problem,) = errors(run("validate", str(spec)))
    assert problem.startswith(f"{spec}:2:3: unknown key 'kkk")
    assert len(problem) < len(str(spec)) + 300


def test_expansion_counts_aliases_at_their_expanded_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlpos, "MAX_EXPANDED_CHARS", 120)  # 108 expanded, then 149
    ok = write_text(tmp_path / "ok", "a.yaml", "namespace: s\ncomment: &c " + "x" * 40
                    + "\nproperties: {a: *c}\n")
    assert run("validate", str(ok)).exit_code == 0
    over = write_text(tmp_path / "over", "a.yaml", "namespace: s\ncomment: &c " + "x" * 40
                      + "\nproperties: {a: *c, b: *c}\n")
    assert errors(run("validate", str(over))) == [
        f"{over}:2:10: more than 120 characters of values and keys after expanding aliases"]


def test_values_are_counted_before_they_are_composed(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of more values than a document may expand to is refused while it is parsed,
    at the first value over the limit, before its values take memory as nodes."""
    monkeypatch.setattr(yamlpos, "MAX_NODES", 1000)
    spec = write_text(tmp_path, "a.yaml", "namespace: s\ncomment: [" + "x, " * 1999 + "x]\n")
    assert errors(run("validate", str(spec))) == [f"{spec}:2:{11 + 3 * 995}: more than 1000 "
                                                  "values"]  # nodes: the mapping, keys, values


def test_problems_are_bounded(tmp_path: Path) -> None:
    limit = yamlpos.MAX_PROBLEMS
    schema_errors = write_text(tmp_path / "a", "a.yaml",
                               "namespace: s\nmanage: [" + "[], " * limit + "[]]\n")
    problems = errors(run("validate", str(schema_errors)))
    assert problems[0] == (f"{schema_errors}:1:1: more than {limit} schema errors in this "
                           f"document; the first {limit} are shown")
    assert problems[1:] == [f"{schema_errors}:2:{10 + 4 * i}: manage[{i}]: [] is not of type "
                            "'string'" for i in range(limit)]
    duplicates = write_text(tmp_path / "b", "a.yaml", "namespace: s\nproperties:\n"
                            + "  k: 1\n" * (limit + 3))
    problems = errors(run("validate", str(duplicates)))
    assert len(problems) == limit + 2
    assert f"{duplicates}:{limit + 4}:3: more than {limit} problems in this file; the rest " \
           "are not checked" in problems


def test_numbers_of_thousands_of_digits_are_text(tmp_path: Path) -> None:
    """Python converts at most 4300 digits to an integer: longer numbers stay text (as
    property values keep every number as written) rather than raising."""
    digits = "9" * 5000
    ok = write_text(tmp_path / "ok", "a.yaml", f"namespace: s\nproperties: {{tier: {digits}}}\n")
    assert run("validate", str(ok)).exit_code == 0
    var_file = write_text(tmp_path, "vars.yaml", f"n: {digits}\n")
    spec = write_text(tmp_path / "bad", "a.yaml", "namespace: s\nprotected: ${var.n}\n")
    assert errors(run("validate", str(spec), "--var-file", str(var_file))) == [
        f"{spec}:2:12: protected: '{'9' * 37}...{'9' * 38}' is not of type 'boolean'"]


@pytest.mark.parametrize(("value", "tag"), [
    ("!!timestamp 2020-13-45", "timestamp"), ("!!float abc", "float"), ("!!int 0xZZ", "int"),
    ("!!bool maybe", "bool"), ("!!timestamp abc", "timestamp"), ("!!float 1:2:x", "float"),
    ("!!int ''", "int")])
def test_explicit_tags_that_do_not_fit_their_value(tmp_path: Path, value: str,
                                                   tag: str) -> None:
    spec = write_text(tmp_path, "a.yaml", f"namespace: s\ncomment: {value}\n")
    text = value.split()[1].strip("'")
    assert errors(run("validate", str(spec))) == [
        f"{spec}:2:10: cannot read this value as {tag}: {text!r}"]


def test_a_type_of_a_million_spaces_is_refused(tmp_path: Path) -> None:
    """The type pattern is matched in linear time (it once backtracked quadratically: hours
    for this value, past the test's timeout)."""
    spec = write_text(tmp_path, "a.yaml", table("a" + " " * 1_000_000 + "!"))
    (problem,) = errors(run("validate", str(spec)))
    assert problem.startswith(f"{spec}:5:25: column 'c': 'a   ")
    assert problem.endswith("' is not a type: write a type name, with parameters where it "
                            "takes them (int8, varchar(20), decimal(12,2)); nested types are "
                            "type: struct, list or map with fields, element or key and value")


# --- characters YAML forbids ----------------------------------------------------------------


FORBIDDEN = ["\x00", "\x07", "\x1b", "\x7f", "\x9f", "\ufffe", "\uffff"]


@pytest.mark.parametrize("char", FORBIDDEN)
def test_forbidden_characters_in_a_spec(tmp_path: Path, char: str) -> None:
    spec = write_text(tmp_path, "a.yaml", f"namespace: s\ncomment: ab{char}c\n")
    assert errors(run("validate", str(spec))) == [
        f"{spec}:2:12: character U+{ord(char):04X} is not allowed in YAML (no control "
        "characters but tab and line breaks, no U+FFFE or U+FFFF); in a double-quoted string "
        f"write it as the escape \\u{ord(char):04x}"]


@pytest.mark.parametrize("char", FORBIDDEN)
def test_forbidden_characters_in_a_vars_file(tmp_path: Path, char: str) -> None:
    spec = write_text(tmp_path / "spec", "a.yaml", "namespace: s\ncomment: ${var.c}\n")
    var_file = write_text(tmp_path, "vars.yaml", f"a: 1\nc: {char}\n")
    assert errors(run("validate", str(spec), "--var-file", str(var_file))) == [
        f"{var_file}:2:4: character U+{ord(char):04X} is not allowed in YAML (no control "
        "characters but tab and line breaks, no U+FFFE or U+FFFF); in a double-quoted string "
        f"write it as the escape \\u{ord(char):04x}"]


def test_allowed_characters_and_escapes(tmp_path: Path) -> None:
    spec = write_text(tmp_path, "a.yaml", "\ufeffnamespace: s\ncomment: \"a\\u0000\tb\x85"
                                          "\u00a0\U0001f600\"\r\n")
    assert run("validate", str(spec)).exit_code == 0


def test_text_that_is_not_utf8_is_located(tmp_path: Path) -> None:
    spec = tmp_path / "a.yaml"
    spec.write_bytes("namespace: s\ncomment: é".encode() + b"\xff\n")
    assert errors(run("validate", str(spec))) == [f"{spec}:2:11: not UTF-8 text: byte 0xff"]


# --- type parameters in range -----------------------------------------------------------


@pytest.mark.parametrize("spelling", ["char", "varchar", "fixed"])
def test_lengths_up_to_the_largest_are_valid_and_planned(tmp_path: Path,
                                                         spelling: str) -> None:
    spec = write_text(tmp_path / "spec", "a.yaml", table(f"{spelling}({MAX_TYPE_PARAMETER})"))
    assert run("validate", str(spec)).exit_code == 0
    assert run("init", tmp_path=tmp_path).exit_code == 0
    result = run("plan", str(spec), tmp_path=tmp_path)
    assert result.exit_code == 0 and f"{spelling}({MAX_TYPE_PARAMETER})" in result.output, (
        result.output)


@pytest.mark.parametrize(("spelling", "message"), [
    (f"char({MAX_TYPE_PARAMETER + 1})", f"char length must be at most {MAX_TYPE_PARAMETER}"),
    ("char(4294967296)", "char length must be at most"),
    (f"varchar({2**32 - 1})", "varchar length must be at most"),
    (f"fixed({MAX_TYPE_PARAMETER + 1})", "fixed length must be at most"),
    (f"decimal({MAX_TYPE_PARAMETER + 1},2)", "invalid decimal precision/scale"),
    ("decimal(12,13)", "invalid decimal precision/scale"),
    ("char(" + "9" * 5000 + ")", "char length must be at most"),
    ("char(007)", f"'char(007)': type parameters are whole numbers from 1 to "
                  f"{MAX_TYPE_PARAMETER}, written without leading zeros"),
    ("varchar(0)", "varchar(0) is not a length: the catalog stores length 0 as unbounded "
                   "text; write varchar")])
def test_type_parameters_out_of_range(tmp_path: Path, spelling: str, message: str) -> None:
    """The schema refuses them (so editors flag them too), with the loader's reasons."""
    spec = write_text(tmp_path, "a.yaml", table(spelling))
    (problem,) = errors(run("validate", str(spec)))
    assert problem.startswith(f"{spec}:5:25: column 'c': {message}")
    assert len(problem) < len(str(spec)) + 250


@pytest.mark.parametrize(("spelling", "message"), [
    ("decimal(39,2)", "invalid decimal precision/scale in 'decimal(39,2)'"),
    ("decimal(10,11)", "invalid decimal precision/scale in 'decimal(10,11)'"),
    ("char(0)", "char needs a positive length: 'char(0)'"),
    ("fixed(0)", "fixed needs a positive length: 'fixed(0)'"),
    ("varchar(0)", "varchar(0) is not a length: the catalog stores length 0 as unbounded "
                   "text; write varchar"),
])
def test_type_parameters_the_loader_refuses(tmp_path: Path, spelling: str,
                                            message: str) -> None:
    spec = write_text(tmp_path, "a.yaml", table(spelling))
    assert errors(run("validate", str(spec))) == [f"{spec}:5:25: column 'c': {message}"]


# --- only regular files ------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    return path


def test_spec_that_is_a_fifo_or_a_device(fifo: Path) -> None:
    assert errors(run("validate", str(fifo))) == [
        f"{fifo}:1:1: cannot read: a FIFO, not a regular file"]
    assert errors(run("validate", "/dev/zero")) == [
        "/dev/zero:1:1: cannot read: a character device, not a regular file"]


def test_spec_folder_holding_a_fifo_or_a_device(tmp_path: Path) -> None:
    folder = tmp_path / "spec"
    write_text(folder, "a.yaml", "namespace: s\n")
    os.mkfifo(folder / "b.yaml")
    (folder / "c.yml").symlink_to("/dev/zero")
    assert errors(run("validate", str(folder))) == [
        f"{folder / 'b.yaml'}:1:1: cannot read: a FIFO, not a regular file",
        f"{folder / 'c.yml'}:1:1: cannot read: a character device, not a regular file"]


def test_vars_file_that_is_a_fifo_or_a_device(tmp_path: Path, fifo: Path) -> None:
    spec = write_text(tmp_path / "spec", "a.yaml", "namespace: s\n")
    assert errors(run("validate", str(spec), "--var-file", str(fifo))) == [
        f"{fifo}:1:1: cannot read: a FIFO, not a regular file"]
    assert errors(run("validate", str(spec), "--var-file", "/dev/zero")) == [
        "/dev/zero:1:1: cannot read: a character device, not a regular file"]


def test_files_larger_than_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlpos, "MAX_FILE_BYTES", 1000)
    spec = write_text(tmp_path / "spec", "a.yaml", "namespace: s\ncomment: " + "x" * 980 + "\n")
    var_file = write_text(tmp_path, "vars.yaml", "a: " + "x" * 1000 + "\n")
    assert errors(run("validate", str(spec))) == [
        f"{spec}:1:1: cannot read: larger than the limit of 1000 bytes"]
    assert errors(run("validate", str(spec), "--var-file", str(var_file))) == [
        f"{var_file}:1:1: cannot read: larger than the limit of 1000 bytes"]
    spec.write_text("namespace: s\ncomment: " + "x" * 900 + "\n", "utf-8")
    assert run("validate", str(spec)).exit_code == 0


def test_saved_plan_that_is_a_fifo_or_a_device(tmp_path: Path) -> None:
    assert run("init", tmp_path=tmp_path).exit_code == 0
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    for source, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        result = run("apply", str(source), "--auto-approve", tmp_path=tmp_path)
        assert errors(result, code=1) == [
            f"{source}: not a readable plan file ({kind}, not a regular file)"]
