"""Core commands: create a catalog, list its contents, verify its files."""

from __future__ import annotations

from typing import Any

import click

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import def_digest
from olympia.cli.common import (
    catalog_options,
    echo_json,
    handle_errors,
    key_value_pairs,
    open_catalog,
    parse_storage_options,
)
from olympia.tree import btree


@click.command("init")
@catalog_options
@click.option("--order", type=click.IntRange(3), default=128, show_default=True,
              help="B-tree order (children per node).")
@click.option("--isolation", type=click.Choice(["SNAPSHOT", "SERIALIZABLE"]), default="SNAPSHOT",
              show_default=True, help="Default transaction isolation level.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Catalog property; repeatable.")
@click.option("--if-not-exists", is_flag=True, help="Succeed if the catalog already exists.")
@handle_errors
def init(catalog_uri: str, storage_option: tuple[str, ...], order: int, isolation: str,
         properties: tuple[str, ...], if_not_exists: bool) -> None:
    """Create an empty catalog (version 0)."""
    props = key_value_pairs("--property", properties)
    options = parse_storage_options(storage_option)
    if if_not_exists and Catalog.exists_at(catalog_uri, options):
        click.echo(f"Catalog already exists at {catalog_uri}")
        return
    catalog = Catalog.create(catalog_uri, options, order=order, txn_isolation_level=isolation,
                             properties=props)
    click.echo(f"Created catalog {catalog.uri} (order {order}, version 0)")


@click.command("ls")
@catalog_options
@click.argument("namespace", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@handle_errors
def ls(catalog_uri: str, storage_option: tuple[str, ...], namespace: str | None,
       as_json: bool) -> None:
    """List namespaces, or the tables and views of NAMESPACE."""
    catalog = open_catalog(catalog_uri, storage_option)
    result: dict[str, Any]
    if namespace is None:
        result = {"version": catalog.version, "namespaces": catalog.list_namespaces()}
    else:
        result = {"version": catalog.version, "namespace": namespace,
                  "tables": catalog.list_tables(namespace), "views": catalog.list_views(namespace)}
    if as_json:
        echo_json(result)
        return
    if namespace is None:
        for name in result["namespaces"]:
            click.echo(name)
    else:
        for name in result["tables"]:
            click.echo(f"table  {namespace}.{name}")
        for name in result["views"]:
            click.echo(f"view   {namespace}.{name}")


@click.command("verify")
@catalog_options
@handle_errors
def verify(catalog_uri: str, storage_option: tuple[str, ...]) -> None:
    """Check the latest version: every node readable and matching its checksum, every B-tree
    invariant, every definition file present, parseable and matching its checksum."""
    catalog = open_catalog(catalog_uri, storage_option)
    snap = catalog.snapshot
    entries = btree.validate(snap.nodes, snap.root.node, snap.catalog_def.order)
    namespaces, tables, views = snap.load_all()
    paths = [snap.root.node.catalog_def or "", *(p for _, p in snap.objects())]
    unchecked = sum(def_digest(p) is None for p in paths)
    note = f"; {unchecked} definition files predate checksums" if unchecked else ""
    click.echo(f"OK: version {snap.version}, depth {snap.depth()}, {entries} objects "
               f"({len(namespaces)} namespaces, {len(tables)} tables, {len(views)} views){note}")


COMMANDS = [init, ls, verify]
