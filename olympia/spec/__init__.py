"""Catalog specs: YAML documents validated by JSON Schema, merged into one desired state."""

from olympia.spec.loader import load_spec
from olympia.spec.model import NamespaceSpec, Spec, TableSpec, ViewSpec

__all__ = ["NamespaceSpec", "Spec", "TableSpec", "ViewSpec", "load_spec"]
