"""Version commands: log, show, diff, rollback, export, and distributed transactions
(``olympia txn``)."""

from __future__ import annotations

import json
from typing import Any

import click

from olympia import versions
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import Snapshot
from olympia.cli.actor import actor_info, user_option
from olympia.cli.common import (
    catalog_options,
    color_option,
    echo_json,
    handle_errors,
    key_value_pairs,
    open_catalog,
    parse_storage_options,
)
from olympia.iceberg import lacks_pyiceberg
from olympia.plan.apply import check_allowed
from olympia.plan.changes import column_text
from olympia.plan.render import change_lines, paint
from olympia.plan.rollback import apply_rollback, plan_rollback
from olympia.plan.versiondiff import version_diff
from olympia.spec import fields as described
from olympia.versions.dtxn import describe_transaction, summarize_transactions, transaction_dict
from olympia.versions.export import MAX_DEPTH
from olympia.versions.policy import parse_duration
from olympia.versions.timetravel import format_millis

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.command("log")
@catalog_options
@click.option("--limit", "-n", type=click.IntRange(1), default=20, show_default=True)
@click.option("--before", type=int, help="Show versions below this one (pagination).")
@json_option
@color_option
@handle_errors
def log(catalog_uri: str, storage_option: tuple[str, ...], limit: int, before: int | None,
        as_json: bool, color: bool) -> None:
    """Versions, newest first, with the actions each one recorded (a namespace rename with
    the tables and views it moved)."""
    catalog = open_catalog(catalog_uri, storage_option)
    entries = versions.history(catalog, limit=limit, before=before)
    if as_json:
        echo_json([e.to_dict() for e in entries])
        return
    for entry in entries:
        data = entry.to_dict()
        head = f"version {entry.version}  {data['created_at']}"
        if entry.rollback:
            head += f"  (rollback of {entry.rollback[0]} to {entry.rollback[1]})"
        click.echo(paint(head, "bold", color), color=color)
        for key, value in sorted(entry.info.items()):
            click.echo(f"    {key}: {value}")
        for action in data["actions"]:
            if "moved_by" in action:
                continue  # shown under the namespace rename that moved it
            click.echo(f"    {action['description']}")
            for move in action.get("moves", ()):
                click.echo(f"        moves {move['type']} {move['from']} -> {move['to']}")
    if entries and entries[-1].version > catalog.files.oldest_version():
        click.echo(f"(more: --before {entries[-1].version})")


def _column_dict(col: Column) -> dict[str, Any]:
    """Every field of a column (defaults included at the top level), its field id and its
    type in the one spelling plans use (``type_text``)."""
    return {"nullable": True, "comment": "", "properties": {}, **col.to_dict(with_ids=True),
            "type_text": column_text(col)}


def _fields(obj: Namespace | Table | View) -> dict[str, Any]:
    """Every field of a definition (olympia.spec.fields) besides its name, defaults
    included."""
    out: dict[str, Any] = {}
    for f in described.definition(described.kind_of(obj)):
        value = f.value(obj)
        if f.compare == described.Compare.MAP:
            value = dict(sorted(value.items()))
        elif f.compare == described.Compare.COLUMNS:
            value = [_column_dict(c) for c in value]
        elif f.compare == described.Compare.REFERENCES:
            value = [f"{a}.{b}" for a, b in value]
        out[f.name] = value
    return out


def _describe(snapshot: Snapshot) -> dict[str, Any]:
    """Everything in one version, every field of every definition."""
    namespaces, tables, views = snapshot.load_all()
    return {
        "version": snapshot.version,
        "created_at": format_millis(snapshot.created_at_millis),
        "namespaces": [{"name": n.name, **_fields(n)} for n in namespaces],
        "tables": [{"name": f"{t.namespace}.{t.name}", "namespace": t.namespace,
                    "object_name": t.name, **_fields(t)} for t in tables],
        "views": [{"name": f"{v.namespace}.{v.name}", "namespace": v.namespace,
                   "object_name": v.name, **_fields(v)} for v in views],
    }


@click.command("show")
@catalog_options
@click.option("--version", "version", type=int, help="A version number.")
@click.option("--as-of", help="The version latest at this instant (ISO-8601 or epoch ms).")
@click.option("--export", "export_name", help="The version recorded by an export.")
@json_option
@color_option
@handle_errors
def show(catalog_uri: str, storage_option: tuple[str, ...], version: int | None,
         as_of: str | None, export_name: str | None, as_json: bool, color: bool) -> None:
    """Everything in the catalog at one version (default: the latest)."""
    catalog = open_catalog(catalog_uri, storage_option)
    snapshot = versions.resolve(catalog, version=version, as_of=as_of, export=export_name)
    if as_json:
        echo_json(_describe(snapshot))
        return
    namespaces, tables, views = snapshot.load_all()
    click.echo(f"version {snapshot.version}  {format_millis(snapshot.created_at_millis)}")
    for ns in namespaces:
        click.echo(paint(f"namespace {ns.name}", "bold", color) + _notes(ns), color=color)
        for t in (t for t in tables if t.namespace == ns.name):
            click.echo(f"  table {t.name} [{t.format}]{_notes(t)}")
            for col in t.columns:
                click.echo(f"    {col.name} {column_text(col)}{_notes(col)}")
        for v in (v for v in views if v.namespace == ns.name):
            click.echo(f"  view {v.name} [{v.dialect}]{_notes(v)}: {' '.join(v.sql.split())}")


def _notes(obj: Namespace | Table | View | Column) -> str:
    """``  (protected; comment "..."; key=value, ...)`` for what an object declares beyond
    its name and type; empty when it declares nothing more."""
    notes = ["protected"] if getattr(obj, "protected", False) else []
    if obj.comment:
        notes.append(f"comment {json.dumps(obj.comment, ensure_ascii=False)}")
    if not isinstance(obj, Column):
        notes += [f"{label}: {text}" for label, text in described.facts(obj)]
    if obj.properties:
        notes.append(", ".join(f"{k}={v}" for k, v in sorted(obj.properties.items())))
    return f"  ({'; '.join(notes)})" if notes else ""


@click.command("diff")
@catalog_options
@click.argument("from_version", type=int)
@click.argument("to_version", type=int)
@json_option
@color_option
@handle_errors
def diff(catalog_uri: str, storage_option: tuple[str, ...], from_version: int,
         to_version: int, as_json: bool, color: bool) -> None:
    """Objects created, dropped, renamed and changed from FROM_VERSION to TO_VERSION, with
    their attribute and column changes, in the signs of a plan."""
    catalog = open_catalog(catalog_uri, storage_option)
    result = version_diff(catalog, from_version, to_version)
    if as_json:
        echo_json(result.to_dict())
        return
    for item in result.changes:
        click.echo("\n".join(change_lines(item.change, color)), color=color)
    if result.coarse.catalog_def_changed:
        click.echo("~ catalog definition")
    if result.empty:
        click.echo("no differences")


@click.command("rollback")
@catalog_options
@click.option("--to", "to_version", required=True, help="A version number, or 'previous'.")
@click.option("--dry-run", is_flag=True, help="Show the changes; commit nothing.")
@click.option("--allow-destructive", is_flag=True,
              help="Make drops, column removals, incompatible type changes and removals of "
                   "protection.")
@click.option("--auto-approve", is_flag=True, help="Do not ask for confirmation (CI).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the changes (--dry-run) or the result as JSON; the changes to "
                   "confirm go to stderr.")
@user_option
@color_option
@handle_errors
def rollback(catalog_uri: str, storage_option: tuple[str, ...], to_version: str,
             dry_run: bool, allow_destructive: bool, auto_approve: bool, as_json: bool,
             user: str | None, color: bool) -> None:
    """Roll back by committing a new version with an older version's contents.

    Shows the changes like a plan and asks for confirmation unless --auto-approve; protected
    objects are never dropped or changed incompatibly (exit 5), other destructive changes
    need --allow-destructive (exit 5); a commit since the preview fails it (exit 4).
    """
    catalog = open_catalog(catalog_uri, storage_option)
    preview = plan_rollback(catalog, to_version)
    if dry_run:
        if as_json:
            echo_json(preview.to_dict())
        else:
            click.echo(preview.render_text(color), color=color)
        return
    if not as_json or not auto_approve:
        click.echo(preview.render_text(color), err=as_json,  # --json: stdout is the result
                   color=color)
    check_allowed(preview, allow_destructive, "rollback", "roll back")
    if not auto_approve:
        click.echo("", err=True)
        answer = click.prompt(f"Roll the catalog back to version {preview.target}? Only "
                              "'yes' will be accepted", default="", show_default=False,
                              err=True)
        if answer.strip() != "yes":
            raise click.ClickException("rollback cancelled; nothing was changed")
    new = apply_rollback(catalog, preview, allow_destructive=allow_destructive,
                         info=actor_info(user))
    if as_json:
        echo_json({"version": new, "rolled_back_from": preview.latest,
                   "to": preview.target, "changes": preview.to_dict()["changes"]})
    else:
        click.echo(f"Rolled back to version {preview.target}: version {new} (was "
                   f"{preview.latest})")


@click.command("export")
@catalog_options
@click.argument("name")
@click.option("--target", required=True, help="Target URI of the export.")
@click.option("--mode", type=click.Choice(["full", "minimal", "partial"]), default="full",
              show_default=True)
@click.option("--version", "version", type=int, help="Version to export (default: latest).")
@click.option("--depth", type=click.IntRange(0, MAX_DEPTH),
              help="Partial: tree levels to copy.")
@click.option("--copy-defs", is_flag=True, help="Partial: copy definition files too.")
@click.option("--target-option", multiple=True, metavar="KEY=VALUE",
              help="Storage option for the target; repeatable.")
@user_option
@json_option
@handle_errors
def export(catalog_uri: str, storage_option: tuple[str, ...], name: str, target: str, mode: str,
           version: int | None, depth: int | None, copy_defs: bool,
           target_option: tuple[str, ...], user: str | None, as_json: bool) -> None:
    """Export a version as NAME to another location and record it in the catalog."""
    catalog = open_catalog(catalog_uri, storage_option)
    target_options = parse_storage_options(target_option) if target_option else (
        catalog.storage.options)

    def progress(done: int, total: int) -> None:
        if not as_json and (done == total or done % 500 == 0):
            click.echo(f"  copied {done}/{total} files", err=True)

    result = versions.export(catalog, name, target, mode, target_storage_options=target_options,
                             version=version, depth=depth, copy_defs=copy_defs,
                             progress=progress, info=actor_info(user))
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(f"Exported version {result.version} as {name!r} ({mode}) to {result.target}: "
                   f"{result.files_copied} files copied, {result.files_skipped} already there; "
                   f"recorded in version {result.committed_version}")


@click.group("txn")
def txn() -> None:
    """Distributed transactions: begin, list, show, commit, abort."""


@txn.command("begin")
@catalog_options
@click.argument("txn_id", metavar="[ID]", required=False)
@click.option("--ttl", default=None, metavar="DURATION",
              help="How long it may stay open (e.g. 2h, 1d); default the catalog's TTL.")
@click.option("--info", "infos", multiple=True, metavar="KEY=VALUE",
              help="An annotation recorded with the version it commits; repeatable.")
@user_option
@json_option
@handle_errors
def txn_begin(catalog_uri: str, storage_option: tuple[str, ...], txn_id: str | None,
              ttl: str | None, infos: tuple[str, ...], user: str | None,
              as_json: bool) -> None:
    """Begin a distributed transaction on the latest version (ID default: a random UUID).

    Statements from any process add to it (OlympiaCatalog, the olympia Spark source,
    `olympia serve` with the warehouse WAREHOUSE@txn:ID); `olympia txn commit ID` lands them
    as ONE version. Records the user who began it.
    """
    catalog = open_catalog(catalog_uri, storage_option)
    info = {**actor_info(user), **key_value_pairs("--info", infos)}
    dtx = catalog.begin_transaction(txn_id, info=info,
                                    ttl_millis=None if ttl is None else parse_duration(ttl))
    if as_json:
        echo_json(transaction_dict(dtx.record))
    else:
        click.echo(f"Began distributed transaction {dtx.id} on version "
                   f"{dtx.record.beginning_version}; it expires "
                   f"{format_millis(dtx.record.expire_at_millis)}")


@txn.command("commit")
@catalog_options
@click.argument("txn_id", metavar="ID")
@json_option
@handle_errors
def txn_commit(catalog_uri: str, storage_option: tuple[str, ...], txn_id: str,
               as_json: bool) -> None:
    """Land everything a distributed transaction holds as ONE version (or finish the commit
    of one whose committer stopped)."""
    catalog = open_catalog(catalog_uri, storage_option)
    version = catalog.distributed_transaction(txn_id).commit()
    if as_json:
        echo_json({"id": txn_id, "committed": True, "version": version})
    else:
        click.echo(f"Committed distributed transaction {txn_id} as version {version}")


@txn.command("list")
@catalog_options
@json_option
@handle_errors
def txn_list(catalog_uri: str, storage_option: tuple[str, ...], as_json: bool) -> None:
    """Every distributed transaction, oldest first: its state, beginning version, age, who
    opened it and the tables and views it touched."""
    catalog = open_catalog(catalog_uri, storage_option)
    records = summarize_transactions(catalog)
    if as_json:
        echo_json(records)
        return
    for r in records:
        state = "expired" if r["expired"] else "expires"
        click.echo(f"{r['id']}  {r['state']}  {r['isolation']}  from version "
                   f"{r['beginning_version']}  age {r['age']}  by {r['user'] or 'unknown'}  "
                   f"{state} {r['expires_at']}  touches {_touched_text(r)}")
    if not records:
        click.echo("no distributed transactions")


def _touched_text(shown: dict[str, Any]) -> str:
    """The tables and views a transaction touched, in words."""
    if shown["tables"] is None:
        return "(unknown: its beginning version expired)"
    names = [*shown["tables"], *(f"view {v}" for v in shown["views"])]
    return ", ".join(names) if names else "nothing yet"


@txn.command("show")
@catalog_options
@click.argument("txn_id", metavar="ID")
@json_option
@handle_errors
def txn_show(catalog_uri: str, storage_option: tuple[str, ...], txn_id: str,
             as_json: bool) -> None:
    """A distributed transaction: its record, who opened it, what it touched and the
    changes it would commit."""
    catalog = open_catalog(catalog_uri, storage_option)
    shown = describe_transaction(catalog, txn_id)
    if as_json:
        echo_json(shown)
        return
    click.echo(click.style(f"transaction {shown['id']}  {shown['state']}  "
                           f"{shown['isolation']}", bold=True))
    click.echo(f"    began {shown['began_at']} from version {shown['beginning_version']} "
               f"(age {shown['age']}) by {shown['user'] or 'unknown'}")
    click.echo(f"    {'expired' if shown['expired'] else 'expires'} {shown['expires_at']}")
    click.echo(f"    touches {_touched_text(shown)}")
    for key, value in sorted(shown["info"].items()):
        click.echo(f"    {key}: {value}")
    for action in shown["actions"] or ():
        click.echo(f"    {action['description']}")


@txn.command("abort")
@catalog_options
@click.argument("txn_id", metavar="ID")
@json_option
@handle_errors
def txn_abort(catalog_uri: str, storage_option: tuple[str, ...], txn_id: str,
              as_json: bool) -> None:
    """Discard a distributed transaction, then delete the Iceberg files its statements
    wrote that no kept version names (under each table's location only); the expiry job
    removes its catalog files."""
    catalog = open_catalog(catalog_uri, storage_option)
    try:
        from olympia.iceberg.catalog import OlympiaCatalog
        from olympia.iceberg.txnfiles import abort_transaction
    except ModuleNotFoundError as exc:
        if not lacks_pyiceberg(exc):
            raise
        versions.abort_transaction(catalog, txn_id)
        deleted: dict[str, list[str]] = {}
        left = ["pyiceberg is not installed, so the Iceberg files the transaction wrote (if "
                "any) cannot be read: they were left"]
    else:
        removed = abort_transaction(OlympiaCatalog.over(catalog), txn_id)
        deleted, left = removed.deleted, removed.left
    if as_json:
        # the Iceberg files' keys only when there are any (a catalog without Iceberg tables
        # answers as before)
        echo_json({"id": txn_id, "aborted": True, **({"deleted_files": deleted} if deleted
                                                      else {}), **({"left": left} if left
                                                                   else {})})
        return
    count = sum(len(paths) for paths in deleted.values())
    click.echo(f"Aborted distributed transaction {txn_id}"
               + (f"; deleted {count} Iceberg files of {', '.join(sorted(deleted))}"
                  if deleted else ""))
    for message in left:
        click.echo(f"    left: {message}")


COMMANDS = [log, show, diff, rollback, export, txn]
