"""Helpers shared by the spec and plan tests: spec directories, plans, golden files."""

from __future__ import annotations

import itertools
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from olympia import Catalog
from olympia.exceptions import SpecError
from olympia.plan import Plan, apply_plan, make_plan
from olympia.spec import load_spec
from olympia.spec.yamlpos import dump

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "catalog"
EXAMPLE_VARS = {"finance_retention": "7y"}
GOLDEN = Path(__file__).parent / "golden"
_ids = itertools.count()


def memory_catalog() -> Catalog:
    return Catalog.create(f"memory://plan-tests-{os.getpid()}-{next(_ids)}")


def write_spec(directory: Path, docs: dict[str, Any]) -> Path:
    """One ``<name>.yaml`` per document, replacing the directory's YAML files."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.yaml"):
        old.unlink()
    for name, doc in docs.items():
        (directory / f"{name}.yaml").write_text(dump(doc), "utf-8")
    return directory


def write_text(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def plan_for(catalog: Catalog, spec: Path, **variables: str) -> Plan:
    return make_plan(catalog, load_spec(spec, variables))


def converge(catalog: Catalog, spec: Path, **variables: str) -> int:
    """Plan and apply (destructive allowed); return the new version."""
    return apply_plan(catalog, plan_for(catalog, spec, **variables),
                      allow_destructive=True).version


def spec_problems(path: Path, **variables: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(path, variables)
    return err.value.problems


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/NAME; OLYMPIA_UPDATE_GOLDEN=1 rewrites the file."""
    path = GOLDEN / name
    if os.environ.get("OLYMPIA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"golden {name} missing (OLYMPIA_UPDATE_GOLDEN=1 writes it)"
    assert text == path.read_text(), f"golden {name} differs (OLYMPIA_UPDATE_GOLDEN=1 rewrites)"


def state(catalog: Any) -> Any:
    """Everything a spec can declare, ids aside, as comparable values."""
    namespaces, tables, views = catalog.load_all()
    return (
        sorted((n.name, sorted(n.properties.items()), n.comment, n.protected)
               for n in namespaces),
        sorted((t.namespace, t.name, tuple(c.without_ids() for c in t.columns),
                sorted(t.properties.items()), t.format, t.table_type, t.location,
                sorted(t.format_properties.items()), t.comment, t.protected) for t in tables),
        sorted((v.namespace, v.name, v.sql.strip(), v.dialect,
                tuple(c.without_ids() for c in v.columns), v.referenced_objects,
                v.default_namespace, sorted(v.properties.items()), v.comment, v.protected)
               for v in views),
    )
