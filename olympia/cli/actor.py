"""Who makes a version from the command line, recorded with it as annotations.

The ``user`` annotation is ``--user``, else ``$OLYMPIA_USER``, else the CI system's actor
(the account that started the run), else the OS user. In CI, ``ci`` names the system and
``ci_run`` the run's address. Only the variables named here are read: identities and
addresses, never tokens.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import click

from olympia.cli.common import F

USER_ENV = "OLYMPIA_USER"


@dataclass(frozen=True)
class _CISystem:
    name: str
    marker: str  # set (to anything) when running under this system
    actor: str  # the variable naming who started the run
    run_url: Callable[[Mapping[str, str]], str]


def _github_run(env: Mapping[str, str]) -> str:
    parts = (env.get("GITHUB_SERVER_URL"), env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID"))
    return f"{parts[0]}/{parts[1]}/actions/runs/{parts[2]}" if all(parts) else ""


#: The CI systems whose actor and run a version records, checked in this order.
CI_SYSTEMS = (
    _CISystem("GitHub Actions", "GITHUB_ACTIONS", "GITHUB_ACTOR", _github_run),
    _CISystem("GitLab CI", "GITLAB_CI", "GITLAB_USER_LOGIN", lambda e: e.get("CI_JOB_URL", "")),
    _CISystem("Buildkite", "BUILDKITE", "BUILDKITE_BUILD_CREATOR",
              lambda e: e.get("BUILDKITE_BUILD_URL", "")),
    _CISystem("CircleCI", "CIRCLECI", "CIRCLE_USERNAME", lambda e: e.get("CIRCLE_BUILD_URL", "")),
    _CISystem("Jenkins", "JENKINS_URL", "BUILD_USER_ID", lambda e: e.get("BUILD_URL", "")),
)


def user_option(fn: F) -> F:
    """Add ``--user`` (or OLYMPIA_USER): who to record as the author of the version."""
    return click.option(
        "--user", "user", envvar=USER_ENV, metavar="NAME",
        help="Who to record as the author of the version (env: OLYMPIA_USER; default: the "
             "CI system's actor, else the OS user).")(fn)


def actor_info(user: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The annotations naming who makes a version: ``user`` and, in CI, ``ci``/``ci_run``.

    Args:
        user: The name given with ``--user`` or OLYMPIA_USER; None to detect it.
        env: The environment to read (default: this process's).

    Returns:
        The annotations; without ``user`` only if nothing can name the actor.
    """
    env = os.environ if env is None else env
    info: dict[str, str] = {}
    system = next((s for s in CI_SYSTEMS if env.get(s.marker)), None)
    if system is not None:
        info["ci"] = system.name
        if run := system.run_url(env):
            info["ci_run"] = run
    detected = user or (env.get(system.actor) if system else None) or _os_user()
    if detected:
        info["user"] = detected
    return info


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        return None
