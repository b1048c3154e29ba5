"""``olympia expire``: run the expiry job (PySpark, local session by default)."""

from __future__ import annotations

import click

from olympia.cli.common import catalog_options, echo_json, handle_errors, parse_storage_options
from olympia.expire import ExpirePolicy, ExpireResult, parse_duration
from olympia.expire.policy import format_duration


def _duration(value: str | None) -> int | None:
    return None if value is None else parse_duration(value)


def report(result: ExpireResult) -> str:
    lines = [
        f"{'Dry run: would expire' if result.dry_run else 'Expired'} {result.versions_expired} "
        f"versions (oldest {result.old_oldest_version} -> {result.new_oldest_version}, "
        f"latest {result.latest_version}) with {result.engine}",
    ]
    for name, f in sorted(result.folders.items()):
        lines.append(f"  {name:5} listed {f.listed:>8}  reachable {f.reachable:>8}  "
                     f"candidates {f.candidates:>8}  deleted {f.deleted:>8}  "
                     f"failed {f.failed:>4}")
    for path, why in sorted(result.protected.items()):
        lines.append(f"  kept {path} ({why})")
    lines.append(f"  identify {result.seconds_identifying:.1f}s, delete "
                 f"{result.seconds_deleting:.1f}s")
    return "\n".join(lines)


@click.command("expire")
@catalog_options
@click.option("--keep-last", type=click.IntRange(1), help="Keep at least this many versions.")
@click.option("--older-than", help="Expire versions superseded longer ago than this (7d).")
@click.option("--grace", help="Delete unreferenced files only when older than this (3d).")
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@click.option("--force", is_flag=True, help="Allow settings below the safety minimum.")
@click.option("--spark-master", default="local[2]", show_default=True,
              help="Spark master for the in-process session.")
@click.option("--local", "single_process", is_flag=True,
              help="Use the single-process engine instead of Spark (small catalogs).")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def expire(catalog_uri: str, storage_option: tuple[str, ...], keep_last: int | None,
           older_than: str | None, grace: str | None, dry_run: bool, force: bool,
           spark_master: str, single_process: bool, as_json: bool) -> None:
    """Expire old versions and delete files no kept version references."""
    options = parse_storage_options(storage_option)
    policy = ExpirePolicy(keep_last, _duration(older_than), _duration(grace), force)
    policy.validate()  # refuse unsafe settings before starting Spark
    if single_process:
        from olympia.catalog.catalog import Catalog
        from olympia.expire import expire_local

        result = expire_local(Catalog.open(catalog_uri, options), policy, dry_run)
    else:
        from olympia.expire import expire_with_spark, local_session

        spark = local_session(spark_master)
        spark.sparkContext.setLogLevel("ERROR")
        result = expire_with_spark(spark, catalog_uri, options, policy, dry_run)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(report(result))
        if result.sample:
            click.echo("  sample: " + ", ".join(result.sample[:5]))
        pol = result.policy
        click.echo(f"  policy: keep-last {pol['keep_last']}, older-than "
                   f"{format_duration(pol['older_than_ms'])}, grace "
                   f"{format_duration(pol['grace_ms'])}")


COMMANDS = [expire]
