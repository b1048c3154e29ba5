"""What every CLI command shares: the catalog option, output helpers and exit codes."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from olympia.catalog.catalog import Catalog
from olympia.exceptions import (
    CommitConflict,
    DestructiveChangeError,
    OlympiaError,
    SpecError,
    StalePlanError,
)
from olympia.iceberg.live import Claims
from olympia.plan.render import want_color

F = TypeVar("F", bound=Callable[..., Any])

# Documented exit codes (README "Exit codes").
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_SPEC_INVALID = 3
EXIT_CONFLICT = 4
EXIT_DESTRUCTIVE = 5


def exit_code_for(exc: OlympiaError) -> int:
    if isinstance(exc, SpecError):
        return EXIT_SPEC_INVALID
    if isinstance(exc, CommitConflict | StalePlanError):
        return EXIT_CONFLICT
    if isinstance(exc, DestructiveChangeError):
        return EXIT_DESTRUCTIVE
    return EXIT_ERROR


def parse_storage_options(values: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (values parsed as JSON when they are JSON) plus
    ``OLYMPIA_STORAGE_OPTIONS`` (a JSON object). Errors name keys at most, never a value
    (options carry secrets)."""
    options: dict[str, Any] = {}
    env = os.environ.get("OLYMPIA_STORAGE_OPTIONS")
    if env:
        try:
            parsed = json.loads(env)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"OLYMPIA_STORAGE_OPTIONS is not valid JSON ({exc.msg} "
                                       f"at line {exc.lineno} column {exc.colno})") from None
        except RecursionError:
            raise click.ClickException("OLYMPIA_STORAGE_OPTIONS is nested too deeply") from None
        if not isinstance(parsed, dict):
            raise click.ClickException("OLYMPIA_STORAGE_OPTIONS must be a JSON object, got "
                                       f"{_JSON_KINDS.get(type(parsed), 'a value')}")
        options.update(parsed)
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--storage-option needs KEY=VALUE, got no '=' in an "
                                   f"option of {len(item)} characters")
        try:
            options[key] = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            options[key] = value
    return options


_JSON_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "true or false", type(None): "null"}


def catalog_options(fn: F) -> F:
    """Add ``-c/--catalog`` (or OLYMPIA_CATALOG) and ``--storage-option`` to a command."""
    fn = click.option("--storage-option", "-o", "storage_option", multiple=True,
                      metavar="KEY=VALUE",
                      help="Storage option (endpoint_url, key, secret, region...); repeatable.")(fn)
    fn = click.option("--catalog", "-c", "catalog_uri", envvar="OLYMPIA_CATALOG", required=True,
                      metavar="URI",
                      help="Catalog URI: a path, file://, s3://bucket/prefix or memory://name "
                           "(env: OLYMPIA_CATALOG).")(fn)
    return fn


def open_catalog(catalog_uri: str, storage_option: tuple[str, ...]) -> Catalog:
    """The catalog at ``catalog_uri``; a distributed transaction it lands (``olympia txn
    commit``) is held to the rule that no two live tables share files (:class:`Claims`)."""
    catalog = Catalog.open(catalog_uri, parse_storage_options(storage_option))
    catalog.require_on_landing(Claims.on)
    return catalog


# Library phrases that name Python arguments, and what a CLI user types instead.
_CLI_WORDS = {" (allow_destructive=True)": "",
              "one of version, as_of and export": "one of --version, --as-of and --export"}


def cli_message(exc: OlympiaError) -> str:
    """An error's message in the command line's words (``--allow-destructive``, never the
    library's keyword argument)."""
    text = str(exc)
    for library, cli in _CLI_WORDS.items():
        text = text.replace(library, cli)
    return text


def exit_on_closed_pipe() -> NoReturn:
    """The reader of stdout went away (``olympia log | head``): stop quietly, exit 0.

    Points stdout at the null device first, so that flushing it at exit cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real descriptor (an in-memory stream): nothing to do
        pass
    sys.exit(EXIT_OK)


def handle_errors(fn: F) -> F:
    """Turn Olympia errors into one clear message and the documented exit code, errors
    of local files (a plan or schema to write, a folder to inspect into) into one naming the
    file, exit 1, and a closed stdout into a quiet exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OlympiaError as exc:
            click.echo(f"Error: {cli_message(exc)}", err=True)
            sys.exit(exit_code_for(exc))
        except BrokenPipeError:
            exit_on_closed_pipe()
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"Error: {where}{exc.strerror or exc}", err=True)
            sys.exit(EXIT_ERROR)

    return wrapper  # type: ignore[return-value]


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def key_value_pairs(option: str, values: tuple[str, ...], shape: str = "KEY=VALUE",
                    ) -> dict[str, str]:
    """``KEY=VALUE`` option values as a dict; a value without ``=`` or with an empty key is
    a usage error naming the option (exit 1)."""
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"{option} needs {shape}, got {item[:60]!r}")
        pairs[key] = value
    return pairs


COLOR_CHOICES = ("auto", "always", "never")


def color_option(fn: F) -> F:
    """Add ``--color auto|always|never`` (and ``--no-color``, the same as ``never``); the
    command gets ``color`` as a bool: auto means stdout is a terminal and NO_COLOR is not
    set. Output must then be echoed with ``color=color`` so that click keeps the escape
    codes through a pipe."""

    @functools.wraps(fn)
    def wrapper(*args: Any, color: str, no_color: bool, **kwargs: Any) -> Any:
        return fn(*args, color=resolve_color("never" if no_color else color), **kwargs)

    wrapped = click.option("--no-color", "no_color", is_flag=True, hidden=True,
                           help="The same as --color never.")(wrapper)
    return click.option("--color", "color", type=click.Choice(COLOR_CHOICES),
                        default="auto", show_default=True,
                        help="Colour the output: always (also through pipes, for CI logs), "
                             "never, or auto (on a terminal unless NO_COLOR is set)."
                        )(wrapped)  # type: ignore[return-value]


def resolve_color(when: str) -> bool:
    """Whether to colour output for ``--color WHEN``."""
    if when == "auto":
        return want_color(sys.stdout)
    return when == "always"
