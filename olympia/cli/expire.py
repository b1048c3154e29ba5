"""``olympia expire`` and the spark-submit entry point: run the expiry job.

``olympia expire`` starts an in-process Spark session (``--spark-master``, default
``local[2]``) or, with ``--local``, runs without Spark. ``python -m olympia.expire`` and
``spark-submit <site-packages>/olympia/expire/__main__.py`` take the same options and use the
session spark-submit configured.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from olympia.catalog.catalog import Catalog
from olympia.cli.common import EXIT_ERROR, catalog_options, echo_json, handle_errors
from olympia.cli.common import parse_storage_options as parse_options
from olympia.expire import ExpirePolicy, ExpireResult

F = TypeVar("F", bound=Callable[..., Any])


def expire_options(fn: F) -> F:
    """The options both entry points share."""
    for option in reversed([
        click.option("--keep-last", type=click.IntRange(1), metavar="N",
                     help="Always keep the newest N versions (default: the catalog's "
                          "olympia.expire.keep-last, else 10)."),
        click.option("--older-than", metavar="DURATION",
                     help="Also keep every version superseded less than this long ago, e.g. "
                          "36h, 7d (default: olympia.expire.older-than, else 7d)."),
        click.option("--grace", metavar="DURATION",
                     help="Delete an unreferenced file only when older than this (default: "
                          "olympia.expire.grace, else 3d)."),
        click.option("--dry-run", is_flag=True, help="Report what would go; change nothing."),
        click.option("--force", is_flag=True,
                     help="Allow older-than or grace below the 1h safety minimum."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        click.option("--prefix-split", type=click.IntRange(1, 2), default=1, show_default=True,
                     help="List node/ and def/ in 16 (1) or 256 (2) prefixes per folder."),
    ]):
        fn = option(fn)
    return catalog_options(fn)


def _policy(catalog: Catalog, keep_last: int | None, older_than: str | None,
            grace: str | None, force: bool) -> ExpirePolicy:
    """Resolved against the catalog's defaults and validated, before Spark starts."""
    return ExpirePolicy.from_catalog(catalog, keep_last=keep_last, older_than=older_than,
                                     grace=grace, force=force)


def _finish(result: ExpireResult, as_json: bool) -> None:
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(result.summary())
    if result.files_failed:
        click.echo(f"Error: {result.files_failed} files could not be deleted; run the job "
                   "again (it is idempotent)", err=True)
        sys.exit(EXIT_ERROR)


@click.command("expire")
@expire_options
@click.option("--spark-master", default="local[2]", show_default=True,
              help="Master of the in-process Spark session.")
@click.option("--local", "single_process", is_flag=True,
              help="Run without Spark (small catalogs).")
@handle_errors
def expire(catalog_uri: str, storage_option: tuple[str, ...], keep_last: int | None,
           older_than: str | None, grace: str | None, dry_run: bool, force: bool,
           as_json: bool, prefix_split: int, spark_master: str, single_process: bool) -> None:
    """Expire old versions and delete files no kept version references."""
    options = parse_options(storage_option)
    catalog = Catalog.open(catalog_uri, options)
    policy = _policy(catalog, keep_last, older_than, grace, force)
    if single_process:
        from olympia.expire import expire_local

        result = expire_local(catalog, policy, dry_run, prefix_split=prefix_split)
    else:
        from olympia.expire import expire_with_spark, local_session

        spark = local_session(spark_master)
        spark.sparkContext.setLogLevel("ERROR")
        result = expire_with_spark(spark, catalog.uri, options, policy, dry_run,
                                   prefix_split=prefix_split)
    _finish(result, as_json)


@click.command("olympia-expire")
@expire_options
@click.option("--spark-master", default="local[2]", show_default=True,
              help="Master when not launched by spark-submit (which sets its own).")
@handle_errors
def job(catalog_uri: str, storage_option: tuple[str, ...], keep_last: int | None,
        older_than: str | None, grace: str | None, dry_run: bool, force: bool,
        as_json: bool, prefix_split: int, spark_master: str) -> None:
    """The Olympia expiry job, as spark-submit (or python -m olympia.expire) runs it."""
    from pyspark.sql import SparkSession

    from olympia.expire import expire_with_spark, local_session

    options = parse_options(storage_option)
    catalog = Catalog.open(catalog_uri, options)
    policy = _policy(catalog, keep_last, older_than, grace, force)
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit: use its settings
        spark = SparkSession.builder.appName("olympia-expire").getOrCreate()
    else:
        spark = local_session(spark_master)
    result = expire_with_spark(spark, catalog.uri, options, policy, dry_run,
                               prefix_split=prefix_split)
    _finish(result, as_json)


COMMANDS = [expire]
