"""Catalog-as-code commands: validate, plan, apply, inspect, schema, fmt."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from olympia.cli.actor import actor_info, user_option
from olympia.cli.common import (
    EXIT_CHANGES,
    EXIT_SPEC_INVALID,
    catalog_options,
    color_option,
    echo_json,
    handle_errors,
    key_value_pairs,
    open_catalog,
)
from olympia.exceptions import SpecError
from olympia.plan import Change, Plan, apply_plan, inspect, make_plan
from olympia.plan.apply import check_allowed, review
from olympia.plan.markdown import render_markdown
from olympia.plan.planfile import KEY_ENV
from olympia.spec import collect_variables, load_spec, schema_path
from olympia.spec.fmt import format_spec
from olympia.spec.loader import SUFFIXES, git_commit_of
from olympia.versions import at_version


def variable_options(fn: Any) -> Any:
    fn = click.option("--var-file", "var_files", multiple=True,
                      type=click.Path(dir_okay=False),
                      help="YAML file of NAME: value pairs for ${var.NAME}; repeatable, later "
                           "files win.")(fn)
    return click.option("--var", "var_pairs", multiple=True, metavar="NAME=VALUE",
                        help="Value of ${var.NAME}; repeatable; wins over --var-file and the "
                             "environment (OLYMPIA_VAR_NAME).")(fn)


def target_option(fn: Any) -> Any:
    return click.option("--target", "targets", multiple=True, metavar="KIND.NAME",
                        help="Limit the plan to this object (namespace.NS, table.NS.NAME, "
                             "view.NS.NAME; quote parts holding dots: table.\"a.b\".c) and "
                             "what it needs; repeatable.")(fn)


def spec_variables(var_pairs: tuple[str, ...], var_files: tuple[str, ...]) -> dict[str, str]:
    """The spec variables given by ``--var NAME=VALUE`` and ``--var-file``."""
    return collect_variables(key_value_pairs("--var", var_pairs, "NAME=VALUE"), var_files)


@click.command("validate")
@click.argument("spec", type=click.Path())
@variable_options
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON: every problem as an object (file, line, "
                   "column, message).")
@handle_errors
def validate(spec: str, var_pairs: tuple[str, ...], var_files: tuple[str, ...],
             as_json: bool) -> None:
    """Check SPEC (a YAML file or a directory of them) without touching any catalog.

    Every problem is printed as file:line:col: message; exit code 3 when there are any.
    """
    variables = spec_variables(var_pairs, var_files)
    if not as_json:
        click.echo(f"Valid: {load_spec(spec, variables).summary()}.")
        return
    try:
        loaded = load_spec(spec, variables)
    except SpecError as exc:
        echo_json({"valid": False, "problems": [problem_dict(p) for p in exc.problems]})
        sys.exit(EXIT_SPEC_INVALID)
    echo_json({"valid": True, "summary": loaded.summary(), "problems": []})


_POSITION = re.compile(r"(?s)(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): (?P<message>.*)")


def problem_dict(problem: str) -> dict[str, Any]:
    """A ``file:line:col: message`` problem as an object; ``line`` and ``column`` are None
    for a problem of a whole file (``file: message``)."""
    found = _POSITION.fullmatch(problem)
    if found:
        return {"file": found["file"], "line": int(found["line"]),
                "column": int(found["column"]), "message": found["message"]}
    file, sep, message = problem.partition(": ")
    return ({"file": file, "line": None, "column": None, "message": message} if sep
            else {"file": None, "line": None, "column": None, "message": problem})


@click.command("plan")
@catalog_options
@click.argument("spec", type=click.Path())
@variable_options
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help="Save the plan, to apply exactly it later with `olympia apply FILE` "
                   f"(signed when {KEY_ENV} is set).")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--format", "output_format", type=click.Choice(["text", "json", "markdown"]),
              default="text", show_default=True,
              help="text (for terminals), json (the versioned saved form) or markdown (for "
                   "pull-request comments).")
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 2 when there are changes, 0 when there are none.")
@target_option
@click.option("--git-commit", envvar="OLYMPIA_GIT_COMMIT", metavar="SHA",
              help="Git commit of the spec, recorded in the plan and then with the version "
                   "(env: OLYMPIA_GIT_COMMIT; default: the commit checked out where SPEC is, "
                   "if any).")
@color_option
@handle_errors
def plan(catalog_uri: str, storage_option: tuple[str, ...], spec: str,
         var_pairs: tuple[str, ...], var_files: tuple[str, ...], out: str | None,
         as_json: bool, output_format: str, detailed_exitcode: bool, targets: tuple[str, ...],
         git_commit: str | None, color: bool) -> None:
    """Show what applying SPEC to the catalog would change.

    SPEC may also be a plan saved with --out: it is then checked against the catalog as
    apply would check it and shown (e.g. as Markdown for a pull request), not made anew.
    """
    catalog = open_catalog(catalog_uri, storage_option)
    if _is_plan_file(spec):
        given = click.get_current_context().get_parameter_source("git_commit")
        if (var_pairs or var_files or out or targets
                or given == ParameterSource.COMMANDLINE):
            raise click.ClickException("--var, --var-file, --out, --target and --git-commit "
                                       "apply to specs; a saved plan is shown as it was saved")
        result = Plan.load(spec, _plan_key())
        review(catalog, result)  # classify it from its operations, as apply would
    else:
        loaded = load_spec(spec, spec_variables(var_pairs, var_files))
        result = make_plan(catalog, loaded, git_commit=git_commit or git_commit_of(spec),
                           targets=targets)
    if out:
        result.save(out, _plan_key())
    if as_json or output_format == "json":
        echo_json(result.to_dict(_plan_key()))  # the saved form, signed as --out would be
    elif output_format == "markdown":
        click.echo(render_markdown(result), nl=False)
    else:
        click.echo(result.render_text(color), color=color)
        if out:
            click.echo(f"\nSaved the plan to {out}; apply exactly these changes with "
                       f"`olympia apply {out}`.")
    if detailed_exitcode and result.has_changes:
        sys.exit(EXIT_CHANGES)


def _is_plan_file(source: str) -> bool:
    """Whether SOURCE names a saved plan: anything but a folder or a YAML file (a FIFO or a
    device is then refused by the plan reader rather than read as a spec)."""
    path = Path(source)
    return path.exists() and not path.is_dir() and path.suffix not in SUFFIXES


@click.command("apply")
@catalog_options
@click.argument("source", type=click.Path())
@variable_options
@click.option("--allow-destructive", is_flag=True,
              help="Apply drops, column removals, incompatible type changes and removals of "
                   "protection.")
@click.option("--auto-approve", is_flag=True, help="Do not ask for confirmation (CI).")
@target_option
@click.option("--git-commit", envvar="OLYMPIA_GIT_COMMIT", metavar="SHA",
              help="Git commit recorded with the new version (env: OLYMPIA_GIT_COMMIT; "
                   "default: the one the saved plan records, or the commit checked out where "
                   "SPEC is, if any).")
@user_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON (the plan to confirm goes to stderr).")
@color_option
@handle_errors
def apply(catalog_uri: str, storage_option: tuple[str, ...], source: str,
          var_pairs: tuple[str, ...], var_files: tuple[str, ...], allow_destructive: bool,
          auto_approve: bool, targets: tuple[str, ...], git_commit: str | None,
          user: str | None, as_json: bool, color: bool) -> None:
    """Apply SOURCE — a spec, or a plan saved by `olympia plan --out` — as ONE new version.

    Shows the plan (on stderr with --json) and asks for confirmation unless --auto-approve.
    A saved plan refuses to apply when an object it manages changed since it was made
    (exit 4); with OLYMPIA_PLAN_KEY set, it must be signed with that key.
    """
    catalog = open_catalog(catalog_uri, storage_option)
    if _is_plan_file(source):
        if var_pairs or var_files or targets:
            raise click.ClickException("--var, --var-file and --target apply to specs; a saved "
                                       "plan already holds its values and targets")
        the_plan = Plan.load(source, _plan_key())
        review(catalog, the_plan)  # classify it from its operations before showing it
    else:
        the_plan = make_plan(catalog, load_spec(source, spec_variables(var_pairs, var_files)),
                             git_commit=git_commit or git_commit_of(source), read_all=True,
                             targets=targets)
    if not as_json or (the_plan.has_changes and not auto_approve):
        click.echo(the_plan.render_text(color), err=as_json,  # --json: stdout is the result
                   color=color)
    if not the_plan.has_changes:
        if as_json:
            echo_json(apply_plan(catalog, the_plan).to_dict())
        return
    check_allowed(the_plan, allow_destructive)
    if not auto_approve:
        click.echo("", err=True)
        answer = click.prompt("Apply these changes to the catalog? Only 'yes' will be "
                              "accepted", default="", show_default=False, err=True)
        if answer.strip() != "yes":
            raise click.ClickException("apply cancelled; nothing was changed")
    info = actor_info(user)
    if git_commit:
        info["git_commit"] = git_commit  # over the saved plan's
    result = apply_plan(catalog, the_plan, allow_destructive=allow_destructive, info=info,
                        progress=None if as_json else _progress)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(f"Applied {len(result.changes)} changes as version {result.version}.")


def _plan_key() -> str | None:
    """The key saved plans are signed with and must be signed with, if one is set."""
    return os.environ.get(KEY_ENV) or None


def _progress(done: int, total: int, change: Change) -> None:
    """Progress on stderr for large plans: about every tenth of the changes."""
    step = max(1, total // 10)
    if total >= 50 and (done % step == 0 or done == total):
        click.echo(f"  staged {done}/{total} changes (last: {change})", err=True)
        if done == total:
            click.echo("  committing one new version...", err=True)


@click.command("inspect")
@catalog_options
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Directory to write the spec files to.")
@click.option("--version", "version", type=int, help="Version to write (default: latest).")
@click.option("--schema-ref", help="Path or URL of the JSON Schema for the editor modeline "
                                   "(default: a copy written next to the files).")
@click.option("--clean", is_flag=True, help="Delete other spec files in the directory.")
@handle_errors
def inspect_cmd(catalog_uri: str, storage_option: tuple[str, ...], out: str,
                version: int | None, schema_ref: str | None, clean: bool) -> None:
    """Write the catalog (or one version) as spec files, one per namespace; planning them
    against the same version shows no changes."""
    catalog = open_catalog(catalog_uri, storage_option)
    reader = catalog.snapshot if version is None else at_version(catalog, version)
    files = inspect(reader, out, schema_ref=schema_ref, clean=clean)
    shown = catalog.version if version is None else version
    click.echo(f"Wrote {len(files)} spec files for version {shown} to {out}.")


@click.command("schema")
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help="Write to FILE instead of printing.")
@handle_errors
def schema_cmd(out: str | None) -> None:
    """Print the JSON Schema of spec documents (for editors and CI linters)."""
    text = schema_path().read_text("utf-8")
    if out:
        Path(out).write_text(text, "utf-8")
    else:
        click.echo(text, nl=False)


@click.command("fmt")
@click.argument("spec", type=click.Path())
@click.option("--check", is_flag=True,
              help="Write nothing; list the files that would change, exit 3 if any (CI).")
@handle_errors
def fmt_cmd(spec: str, check: bool) -> None:
    """Rewrite SPEC's YAML files in the canonical layout (indentation, key order, quoting,
    blank lines), keeping comments and every value. Each file is replaced whole, keeping its
    mode; read-only files and links leading outside SPEC are refused (exit 1)."""
    changed = format_spec(spec, write=not check)
    for file in changed:
        click.echo(f"{'would reformat' if check else 'reformatted'} {file}")
    if check and changed:
        sys.exit(EXIT_SPEC_INVALID)
    if not changed:
        click.echo("All spec files are formatted.")


COMMANDS = [validate, plan, apply, inspect_cmd, schema_cmd, fmt_cmd]
