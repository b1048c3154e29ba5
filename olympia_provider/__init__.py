"""Apache Airflow provider for Olympia catalogs: hook, operators, sensors, triggers."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, metadata
from typing import Any

__version__ = "0.1.0"

_HOOK = "olympia_provider.hooks.olympia.OlympiaHook"
DISTRIBUTION = "olympia-catalog"


def documentation_url() -> str | None:
    """The distribution's ``Documentation`` project URL (``[project.urls]``), if declared."""
    try:
        urls = metadata(DISTRIBUTION).get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in map(str, urls):
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation" and url.strip():
            return url.strip()
    return None


def get_provider_info() -> dict[str, Any]:
    """Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""
    return {
        "package-name": DISTRIBUTION,
        "name": "Olympia",
        "description": "Apply, roll back, export and expire Olympia catalog versions; "
                       "write-audit-publish across tables in one distributed transaction; "
                       "wait for new versions.",
        "versions": [__version__],
        "integrations": [{"integration-name": "Olympia", "tags": ["software"],
                          **({"external-doc-url": url} if (url := documentation_url()) else {})}],
        "hooks": [{"integration-name": "Olympia",
                   "python-modules": ["olympia_provider.hooks.olympia"]}],
        "operators": [{"integration-name": "Olympia",
                       "python-modules": ["olympia_provider.operators.olympia"]}],
        "sensors": [{"integration-name": "Olympia",
                     "python-modules": ["olympia_provider.sensors.olympia"]}],
        "triggers": [{"integration-name": "Olympia",
                      "python-modules": ["olympia_provider.triggers.olympia"]}],
        "asset-uris": [{"schemes": ["olympia"],
                        "handler": "olympia_provider.assets.normalize_asset_uri"}],
        "connection-types": [{
            "hook-class-name": _HOOK,
            "hook-name": "Olympia catalog",
            "connection-type": "olympia",
            "conn-fields": {
                "storage_options": {
                    "label": "Storage options (JSON)",
                    "schema": {"type": ["object", "string", "null"]},
                    "description": "Passed to the storage; the secret goes in Password.",
                },
                "spark_master": {
                    "label": "Spark master for expiry",
                    "schema": {"type": ["string", "null"]},
                    "description": "In-process master (local[N]) or the cluster's master "
                                   "for spark-submit.",
                },
                "rest_uri": {
                    "label": "olympia serve URL",
                    "schema": {"type": ["string", "null"]},
                    "description": "The REST catalog Spark jobs write through (inside a "
                                   "transaction: the warehouse <warehouse>@txn:<id>).",
                },
                "rest_warehouse": {
                    "label": "Warehouse served",
                    "schema": {"type": ["string", "null"]},
                    "description": "Default: the catalog's warehouse property, as the "
                                   "server's.",
                },
            },
            "ui-field-behaviour": {
                "hidden-fields": ["schema", "port", "extra"],
                "relabeling": {"host": "Catalog URI", "login": "Access key id",
                               "password": "Secret access key"},
                "placeholders": {
                    "host": "s3://bucket/catalog, gs://bucket/catalog, "
                            "abfs://container/catalog, file:///path or /path",
                    "login": "S3: access key id; Azure: account name; GCS: project",
                    "password": "S3: secret access key; Azure: account key; GCS: OAuth2 token",
                    "storage_options": '{"endpoint_url": "https://s3.example", '
                                       '"region": "eu-west-1"}',
                    "spark_master": "local[2]",
                    "rest_uri": "http://olympia-serve:8181",
                    "rest_warehouse": "s3://bucket/warehouse",
                },
            },
        }],
    }
