"""A read-only web UI of an Olympia catalog: browse, history, diff (server-rendered HTML)."""

from olympia.ui.app import create_ui

__all__ = ["create_ui"]
