"""``olympia expire`` through click's CliRunner, and the job as spark-submit runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Location
from expire_fixtures import ORPHAN, build, files

from olympia import Catalog
from olympia.cli import main

pytestmark = pytest.mark.spark


def test_cli_expire(spark: Any, tmp_path: Any) -> None:
    catalog, _ = build(Location(str(tmp_path / "c"), {}, "local"), order=4, tables=6,
                       alters=0)
    catalog.storage.write(ORPHAN, b"orphan")
    runner = CliRunner()
    env = {"OLYMPIA_CATALOG": catalog.uri}
    out = runner.invoke(main, ["expire", "--grace", "0s"], env=env)
    assert out.exit_code == 1
    assert out.output.strip().splitlines() == [
        "Error: grace 0s is below the safety minimum 1h: files of commits still in flight "
        "could be deleted. Use force to override."]
    out = runner.invoke(main, ["expire", "--older-than", "a week"], env=env)
    assert out.exit_code == 1 and "invalid duration 'a week'" in out.output
    listed = files(catalog)

    out = runner.invoke(main, ["expire", "--keep-last", "2", "--older-than", "0s", "--grace",
                               "0s", "--force", "--dry-run", "--json"], env=env)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["dry_run"] and data["engine"] == "spark"
    assert data["versions_expired"] == catalog.version - 1 and data["files_deleted"] == 0
    assert ORPHAN in data["sample"] and files(catalog) == listed
    assert set(data["timings"]) >= {"list", "walk", "classify"}
    assert sum(data["timings"].values()) == pytest.approx(data["seconds_identifying"])

    out = runner.invoke(main, ["expire", "-c", catalog.uri, "--keep-last", "2",
                               "--older-than", "0s", "--grace", "0s", "--force", "--local"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"Expired {data['versions_expired']} versions of ")
    assert "with local" in out.output.splitlines()[0]
    assert Catalog.open(catalog.uri).files.oldest_version() == catalog.version - 1
    assert ORPHAN not in files(catalog)


def test_spark_submit_entry_point(tmp_path: Any) -> None:
    """The job as a cluster runs it: spark-submit of olympia/expire/__main__.py."""
    import olympia.expire

    catalog, _ = build(Location(str(tmp_path / "c"), {}, "local"), order=4, tables=4,
                       alters=0)
    script = Path(olympia.expire.__file__).with_name("__main__.py")
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.driver.host=127.0.0.1", str(script),
         "--catalog", catalog.uri, "--storage-option", "max_concurrency=4", "--keep-last",
         "2", "--older-than", "0s", "--grace", "0s", "--force", "--json"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert result["engine"] == "spark" and not result["dry_run"]
    assert result["versions_expired"] == catalog.version - 1
    assert Catalog.open(catalog.uri).files.oldest_version() == catalog.version - 1
    usage = subprocess.run([sys.executable, "-m", "olympia.expire", "--help"],
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "--keep-last N" in usage.stdout
