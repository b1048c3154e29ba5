"""Catalog-as-code commands: validate, plan, apply, inspect."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import yaml

from olympia.cli.common import (
    EXIT_CHANGES,
    catalog_options,
    echo_json,
    handle_errors,
    open_catalog,
)
from olympia.exceptions import SpecError
from olympia.plan import Plan, apply_plan, make_plan
from olympia.plan.inspect import inspect as inspect_catalog
from olympia.spec import load_spec
from olympia.versions import resolve


def variable_options(fn: Any) -> Any:
    fn = click.option("--var-file", "var_files", multiple=True,
                      type=click.Path(exists=True, dir_okay=False),
                      help="YAML file of NAME: VALUE pairs for ${var.NAME}; repeatable.")(fn)
    return click.option("--var", "var_pairs", multiple=True, metavar="NAME=VALUE",
                        help="Value for ${var.NAME}; repeatable (env: OLYMPIA_VAR_NAME).")(fn)


def _variables(var_pairs: tuple[str, ...], var_files: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for file in var_files:
        try:
            data = yaml.safe_load(Path(file).read_text()) or {}
        except yaml.YAMLError as exc:
            raise SpecError([f"{file}: invalid YAML in vars file ({exc})"]) from None
        if not isinstance(data, dict):
            raise SpecError([f"{file}:1:1: a vars file must be a mapping of NAME: VALUE"])
        found.update({str(k): str(v) for k, v in data.items()})
    for pair in var_pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise click.UsageError(f"--var needs NAME=VALUE, got {pair!r}")
        found[name] = value
    return found


@click.command("validate")
@click.argument("spec", type=click.Path())
@variable_options
@handle_errors
def validate(spec: str, var_pairs: tuple[str, ...], var_files: tuple[str, ...]) -> None:
    """Check SPEC (a file or a directory of YAML) without touching any catalog."""
    loaded = load_spec(spec, _variables(var_pairs, var_files))
    click.echo(f"Valid: {len(loaded.files)} files, {len(loaded.namespaces)} namespaces, "
               f"{len(loaded.tables)} tables, {len(loaded.views)} views.")


@click.command("plan")
@catalog_options
@click.argument("spec", type=click.Path())
@variable_options
@click.option("--out", "out", type=click.Path(dir_okay=False), help="Save the plan to apply.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable plan.")
@click.option("--detailed-exitcode", is_flag=True, help="Exit 2 when there are changes.")
@click.option("--color/--no-color", default=None, help="Colours (default: on a terminal, "
              "unless NO_COLOR is set).")
@handle_errors
def plan(catalog_uri: str, storage_option: tuple[str, ...], spec: str,
         var_pairs: tuple[str, ...], var_files: tuple[str, ...], out: str | None,
         as_json: bool, detailed_exitcode: bool, color: bool | None) -> None:
    """Show what applying SPEC would change."""
    loaded = load_spec(spec, _variables(var_pairs, var_files))
    catalog = open_catalog(catalog_uri, storage_option)
    result = make_plan(catalog, loaded)
    if out:
        result.save(out)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(result.render_text(color))
        if out:
            click.echo(f"Saved the plan to {out}: apply it with `olympia apply {out}`.")
    if detailed_exitcode and result.has_changes:
        sys.exit(EXIT_CHANGES)


@click.command("apply")
@catalog_options
@click.argument("source", type=click.Path())
@variable_options
@click.option("--allow-destructive", is_flag=True, help="Apply drops, column removals and "
              "incompatible type changes.")
@click.option("--auto-approve", is_flag=True, help="Do not ask for confirmation.")
@click.option("--git-commit", help="Git commit id recorded with the new version.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
@click.option("--color/--no-color", default=None)
@handle_errors
def apply(catalog_uri: str, storage_option: tuple[str, ...], source: str,
          var_pairs: tuple[str, ...], var_files: tuple[str, ...], allow_destructive: bool,
          auto_approve: bool, git_commit: str | None, as_json: bool,
          color: bool | None) -> None:
    """Apply SOURCE (a spec, or a plan saved by `olympia plan --out`) as one new version."""
    catalog = open_catalog(catalog_uri, storage_option)
    if source.endswith(".json") and Path(source).is_file():
        the_plan = Plan.load(source)
    else:
        the_plan = make_plan(catalog, load_spec(source, _variables(var_pairs, var_files)))
    if not as_json:
        click.echo(the_plan.render_text(color))
    if not the_plan.has_changes:
        if as_json:
            echo_json({"version": catalog.version, "changes": [], "changed_objects": []})
        return
    if not auto_approve:
        if not sys.stdin.isatty():
            raise click.UsageError("refusing to apply without confirmation: use --auto-approve")
        click.confirm("Apply these changes?", abort=True)

    def progress(done: int, total: int, change: Any) -> None:
        if not as_json and total >= 50 and (done % 100 == 0 or done == total):
            click.echo(f"  staged {done}/{total} changes", err=True)

    info = {"git_commit": git_commit} if git_commit else {}
    result = apply_plan(catalog, the_plan, allow_destructive=allow_destructive, info=info,
                        progress=progress)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(f"Applied {len(result.changes)} changes as version {result.version}.")


@click.command("inspect")
@catalog_options
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Directory to write the spec files to.")
@click.option("--version", "version", type=int, help="Version to inspect (default: latest).")
@click.option("--schema-ref", help="Path or URL of the JSON Schema for the editor modeline.")
@handle_errors
def inspect(catalog_uri: str, storage_option: tuple[str, ...], out: str, version: int | None,
            schema_ref: str | None) -> None:
    """Write the catalog (or one version) as spec files, one per namespace."""
    catalog = open_catalog(catalog_uri, storage_option)
    snapshot = resolve(catalog, version=version)
    files = inspect_catalog(snapshot, out, schema_ref)
    click.echo(f"Wrote {len(files)} spec files for version {snapshot.version} to {out}")


COMMANDS = [validate, plan, apply, inspect]
