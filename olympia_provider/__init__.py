"""Apache Airflow provider for Olympia catalogs: hook, operators, sensors, triggers."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_HOOK = "olympia_provider.hooks.olympia.OlympiaHook"


def get_provider_info() -> dict[str, Any]:
    """Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""
    return {
        "package-name": "olympia-catalog",
        "name": "Olympia",
        "description": "Apply, roll back, export and expire Olympia catalog versions; wait for "
                       "new versions.",
        "versions": [__version__],
        "integrations": [{"integration-name": "Olympia", "tags": ["software"]}],
        "hooks": [{"integration-name": "Olympia",
                   "python-modules": ["olympia_provider.hooks.olympia"]}],
        "operators": [{"integration-name": "Olympia",
                       "python-modules": ["olympia_provider.operators.olympia"]}],
        "sensors": [{"integration-name": "Olympia",
                     "python-modules": ["olympia_provider.sensors.olympia"]}],
        "triggers": [{"integration-name": "Olympia",
                      "python-modules": ["olympia_provider.triggers.olympia"]}],
        "connection-types": [{
            "hook-class-name": _HOOK,
            "hook-name": "Olympia catalog",
            "connection-type": "olympia",
            "conn-fields": {
                "catalog_uri": {
                    "label": "Catalog URI",
                    "schema": {"type": ["string", "null"]},
                    "description": "s3://bucket/prefix, file:///path or a local path "
                                   "(or put it in Host)",
                },
                "storage_options": {
                    "label": "Storage options (JSON)",
                    "schema": {"type": ["object", "string", "null"]},
                    "description": 'e.g. {"endpoint_url": "https://...", "region": "eu-west-1"}',
                },
                "spark_master": {
                    "label": "Spark master for expiry",
                    "schema": {"type": ["string", "null"], "default": "local[2]"},
                },
            },
            "ui-field-behaviour": {
                "hidden-fields": ["schema", "port", "extra"],
                "relabeling": {"host": "Catalog URI", "login": "Access key id",
                               "password": "Secret access key"},
                "placeholders": {"host": "s3://bucket/catalog"},
            },
        }],
    }
