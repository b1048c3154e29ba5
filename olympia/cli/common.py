"""What every CLI command shares: the catalog option, output helpers and exit codes."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from olympia.catalog.catalog import Catalog
from olympia.exceptions import (
    CommitConflict,
    DestructiveChangeError,
    OlympiaError,
    SpecError,
    StalePlanError,
)

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
    return Catalog.open(catalog_uri, parse_storage_options(storage_option))


def handle_errors(fn: F) -> F:
    """Turn Olympia errors into one clear message and the documented exit code, and errors
    of local files (a plan or schema to write, a folder to inspect into) into one naming the
    file, exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OlympiaError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exit_code_for(exc))
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"Error: {where}{exc.strerror or exc}", err=True)
            sys.exit(EXIT_ERROR)

    return wrapper  # type: ignore[return-value]


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
