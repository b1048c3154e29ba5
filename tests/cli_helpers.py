"""Running the ``olympia`` command line in-process for tests, with a fixed environment."""

from __future__ import annotations

import traceback

from click.testing import CliRunner, Result

from olympia.cli import main


class Cli:
    """``cli("plan", spec)`` runs ``olympia plan SPEC`` with ``env`` (None unsets a
    variable); an exception other than the exit is a test failure with its traceback."""

    def __init__(self, env: dict[str, str | None]) -> None:
        self.env = env

    def __call__(self, *args: str) -> Result:
        result = CliRunner().invoke(main, list(args), env=self.env)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            "".join(traceback.format_exception(result.exception)))
        return result
