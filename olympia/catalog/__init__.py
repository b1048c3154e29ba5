"""Catalog layer: objects, keys, actions, snapshots, transactions and the Catalog itself."""
