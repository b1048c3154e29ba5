"""The ``olympia`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from olympia.cli import code, core, drift, expire, serve, versions
from olympia.cli.common import EXIT_ERROR, EXIT_OK


class _Group(click.Group):
    """Click's group, but every user error exits 1 with one line on stderr: click's usage
    errors would exit 2, which ``plan --detailed-exitcode`` reserves for "changes present"."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            status = EXIT_ERROR
        except click.ClickException as exc:
            hint = (f" (see '{exc.ctx.command_path} --help')"
                    if isinstance(exc, click.UsageError) and exc.ctx else "")
            click.echo(f"Error: {exc.format_message()}{hint}", err=True)
            status = EXIT_ERROR
        except click.Abort:
            click.echo("Aborted!", err=True)
            status = EXIT_ERROR
        sys.exit(status if isinstance(status, int) else EXIT_OK)  # an int: --help, --version


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="olympia-catalog")
def main() -> None:
    """Olympia: a storage-only data catalog, managed as code."""


for _module in (core, code, drift, versions, expire, serve):
    for _command in _module.COMMANDS:
        main.add_command(_command)
