"""Every version the command line makes records who made it (``user``, and the CI run)."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from cli_helpers import Cli

from olympia import Catalog, versions
from olympia.cli.actor import CI_SYSTEMS, USER_ENV, actor_info

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = str(ROOT / "examples" / "catalog")
#: No CI system and no OLYMPIA_USER, whatever runs this suite.
PLAIN: dict[str, str | None] = {USER_ENV: None, "NO_COLOR": "1", "CI_JOB_URL": None,
                                **{s.marker: None for s in CI_SYSTEMS},
                                **{s.actor: None for s in CI_SYSTEMS}}
GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "octocat",
          "GITHUB_SERVER_URL": "https://github.example", "GITHUB_REPOSITORY": "data/catalog",
          "GITHUB_RUN_ID": "42", "GITHUB_TOKEN": "ghs_secret"}


def latest_info(catalog: Catalog) -> dict[str, str]:
    return versions.history(catalog, limit=1)[0].info


def test_apply_rollback_export_and_txn_record_their_author(tmp_path: Path) -> None:
    uri = str(tmp_path / "cat")
    catalog = Catalog.create(uri)
    cli = Cli({**PLAIN, "OLYMPIA_CATALOG": uri})
    out = cli("apply", EXAMPLES, "--var", "finance_retention=7y", "--auto-approve")
    assert out.exit_code == 0, out.output
    assert latest_info(catalog)["user"] == getpass.getuser()  # nothing else names anyone

    catalog.create_table("sales", "scratch", columns=[{"name": "id", "type": "int8"}])
    out = cli("rollback", "--to", "previous", "--auto-approve", "--allow-destructive",
              "--user", "ana")
    assert out.exit_code == 0, out.output
    assert latest_info(catalog)["user"] == "ana"

    cli.env[USER_ENV] = "bob"
    out = cli("export", "e1", "--target", str(tmp_path / "e1"))
    assert out.exit_code == 0, out.output
    assert latest_info(catalog)["user"] == "bob"

    cli.env.update({USER_ENV: None, **GITHUB})
    out = cli("txn", "begin", "wap")
    assert out.exit_code == 0, out.output
    with catalog.transaction(name="wap") as stmt:
        stmt.create_namespace("landing")
    assert cli("txn", "commit", "wap").exit_code == 0
    info = latest_info(catalog)
    assert {k: info[k] for k in ("user", "ci", "ci_run")} == {
        "user": "octocat", "ci": "GitHub Actions",
        "ci_run": "https://github.example/data/catalog/actions/runs/42"}
    assert not any("secret" in value for value in info.values())  # never a token


@pytest.mark.parametrize(("env", "given", "expected"), [
    ({}, "zoe", {"user": "zoe"}),
    ({"GITLAB_CI": "true", "GITLAB_USER_LOGIN": "gl-user", "CI_JOB_URL": "https://gl/j/1"},
     None, {"user": "gl-user", "ci": "GitLab CI", "ci_run": "https://gl/j/1"}),
    ({"GITLAB_CI": "true", "GITLAB_USER_LOGIN": "gl-user"}, "release-bot",
     {"user": "release-bot", "ci": "GitLab CI"}),  # the given name wins; the CI still shown
    ({"JENKINS_URL": "https://ci", "BUILD_URL": "https://ci/job/7"}, None,
     {"user": getpass.getuser(), "ci": "Jenkins", "ci_run": "https://ci/job/7"}),
])
def test_who_is_recorded(env: dict[str, str], given: str | None,
                         expected: dict[str, str]) -> None:
    assert actor_info(given, env) == expected
