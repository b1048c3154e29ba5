"""The public API as tools see it: real signatures, precise errors, a closable catalog."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from olympia import Catalog
from olympia.catalog.reader import WRITE_METHODS, Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import (
    NoSuchColumnError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchVersionError,
    NoSuchViewError,
    NotFoundError,
    ReadOnlyError,
    VersionExpiredError,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(WRITE_METHODS - {"transaction"}))
def test_catalog_write_methods_have_the_transaction_signature(name: str) -> None:
    ours = inspect.signature(getattr(Catalog, name))
    theirs = inspect.signature(getattr(Transaction, name))
    assert ours == theirs
    assert "kwargs" not in ours.parameters
    doc = inspect.getdoc(getattr(Catalog, name)) or ""
    assert "Raises:" in doc


def test_snapshots_have_no_write_methods_for_type_checkers(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from olympia import Catalog\n"
        "catalog = Catalog.open('memory://x')\n"
        "catalog.create_table('s', 't', colums=[])\n"  # misspelled keyword
        "catalog.at_version(1).create_table('s', 't')\n"  # a snapshot cannot write
        "catalog.create_namespace('s', protected=True)\n"  # correct: no error
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
         str(snippet)], cwd=REPO, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert any(':3: error: Unexpected keyword argument "colums"' in e for e in errors), done.stdout
    assert any(":4: error:" in e and "create_table" in e for e in errors), done.stdout
    assert not any(":5:" in e for e in errors), done.stdout


def test_missing_objects_raise_precise_errors() -> None:
    catalog = Catalog.create("memory://api-errors")
    catalog.create_namespace("s")
    catalog.create_table("s", "t", columns=[{"name": "id", "type": "int8"}])
    cases = [
        (lambda: catalog.load_namespace("nope"), NoSuchNamespaceError),
        (lambda: catalog.list_tables("nope"), NoSuchNamespaceError),
        (lambda: catalog.load_table("s.nope"), NoSuchTableError),
        (lambda: catalog.drop_table("s.nope"), NoSuchTableError),
        (lambda: catalog.load_view("s.nope"), NoSuchViewError),
        (lambda: catalog.create_table("nope", "t"), NoSuchNamespaceError),
        (lambda: catalog.alter_table("s.t", remove_columns=["x"]), NoSuchColumnError),
        (lambda: catalog.at_version(99), NoSuchVersionError),
    ]
    for call, error in cases:
        with pytest.raises(error) as caught:
            call()
        assert isinstance(caught.value, NotFoundError)  # callers catching the base still work


def test_expired_versions_raise_version_expired(tmp_path: Path) -> None:
    catalog = Catalog.create(str(tmp_path / "wh"))
    for name in ("a", "b", "c"):
        catalog.create_namespace(name)
    catalog.files.write_hint("vn/oldest", 2)
    with pytest.raises(VersionExpiredError, match="version 1 has expired"):
        catalog.at_version(1)


def test_snapshot_write_methods_refuse_at_run_time() -> None:
    catalog = Catalog.create("memory://api-readonly")
    snapshot: Snapshot = catalog.at_version(0)
    with pytest.raises(ReadOnlyError, match="version 0 .*drop_table"):
        snapshot.drop_table("s.t")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        snapshot.no_such_method  # type: ignore[attr-defined]  # noqa: B018


def test_catalog_closes_as_a_context_manager(tmp_path: Path) -> None:
    Catalog.create(str(tmp_path / "wh")).close()
    with Catalog.open(str(tmp_path / "wh")) as catalog:
        catalog.create_namespace("s")
        assert catalog.list_namespaces() == ["s"]
    with Catalog.open(str(tmp_path / "wh")) as again:
        assert again.version == 1
