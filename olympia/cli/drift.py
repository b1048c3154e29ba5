"""``olympia drift``: objects a spec manages that changed outside it since its last apply."""

from __future__ import annotations

import sys

import click

from olympia.cli.code import spec_variables, variable_options
from olympia.cli.common import (
    EXIT_CHANGES,
    catalog_options,
    color_option,
    echo_json,
    handle_errors,
    open_catalog,
)
from olympia.plan.drift import find_drift
from olympia.spec import load_spec


@click.command("drift")
@catalog_options
@click.argument("spec", type=click.Path())
@variable_options
@click.option("--json", "as_json", is_flag=True, help="Print the drift as JSON.")
@color_option
@handle_errors
def drift(catalog_uri: str, storage_option: tuple[str, ...], spec: str,
          var_pairs: tuple[str, ...], var_files: tuple[str, ...], as_json: bool,
          color: bool) -> None:
    """Objects SPEC manages that changed outside it since its last apply, each with the
    version, time and annotations (tool, user, git commit) of the commits that changed it.

    Exit 2 when there is drift, 0 when there is none (for a scheduled check).
    """
    loaded = load_spec(spec, spec_variables(var_pairs, var_files))
    report = find_drift(open_catalog(catalog_uri, storage_option), loaded)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.render_text(color), color=color)
    if report.has_drift:
        sys.exit(EXIT_CHANGES)


COMMANDS = [drift]
