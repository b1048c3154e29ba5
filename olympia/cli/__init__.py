"""The ``olympia`` command line."""

from __future__ import annotations

import click

from olympia.cli import code, core, expire, versions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="olympia-catalog")
def main() -> None:
    """Olympia: a storage-only data catalog, managed as code."""


for _module in (core, code, versions, expire):
    for _command in _module.COMMANDS:
        main.add_command(_command)
