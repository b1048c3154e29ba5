"""Olympia as an Apache Iceberg catalog for pyiceberg (install the ``iceberg`` extra).

``olympia.iceberg.OlympiaCatalog`` is what ``py-catalog-impl`` names; pyiceberg is imported
only when this package is used, so ``import olympia`` works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from olympia.iceberg.catalog import OlympiaCatalog

__all__ = ["OlympiaCatalog", "lacks_pyiceberg"]


def lacks_pyiceberg(exc: ModuleNotFoundError) -> bool:
    """Whether an import failed because pyiceberg (the ``iceberg`` extra) is not installed."""
    return bool(exc.name) and str(exc.name).split(".")[0] == "pyiceberg"


def __getattr__(name: str) -> Any:
    if name != "OlympiaCatalog":
        raise AttributeError(f"module 'olympia.iceberg' has no attribute {name!r}")
    try:
        from olympia.iceberg.catalog import OlympiaCatalog
    except ModuleNotFoundError as exc:
        if lacks_pyiceberg(exc):
            raise ImportError("olympia.iceberg needs pyiceberg: pip install "
                              "'olympia-catalog[iceberg]'") from exc
        raise
    return OlympiaCatalog
