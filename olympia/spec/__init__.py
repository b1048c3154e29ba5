"""Catalog specs: YAML documents validated by JSON Schema, merged into one desired state."""

from olympia.spec.loader import load_spec, spec_files
from olympia.spec.model import NamespaceSpec, Spec, TableSpec, ViewSpec
from olympia.spec.schema import SCHEMA_FILE_NAME, schema, schema_id, schema_path
from olympia.spec.variables import collect as collect_variables
from olympia.spec.variables import read_var_file

__all__ = [
    "SCHEMA_FILE_NAME", "NamespaceSpec", "Spec", "TableSpec", "ViewSpec", "collect_variables",
    "load_spec", "read_var_file", "schema", "schema_id", "schema_path", "spec_files",
]
