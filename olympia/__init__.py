"""Olympia: a storage-only data catalog in the Olympia format."""
