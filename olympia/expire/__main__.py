"""``python -m olympia.expire`` / ``spark-submit``: the expiry job with its own session.

Example on a cluster::

    spark-submit --master yarn --py-files olympia.zip .../olympia/expire/__main__.py \\
        --catalog s3://bucket/catalog -o endpoint_url=https://... --older-than 7d
"""

from __future__ import annotations

import json
import os
import sys

import click

from olympia.cli.common import handle_errors, parse_storage_options
from olympia.cli.expire import report
from olympia.expire import ExpirePolicy, expire_with_spark, local_session, parse_duration


@click.command()
@click.option("--catalog", "-c", "catalog_uri", envvar="OLYMPIA_CATALOG", required=True)
@click.option("--storage-option", "-o", multiple=True, metavar="KEY=VALUE")
@click.option("--keep-last", type=click.IntRange(1))
@click.option("--older-than")
@click.option("--grace")
@click.option("--dry-run", is_flag=True)
@click.option("--force", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--spark-master", default="local[2]", show_default=True,
              help="Master when not started by spark-submit (which sets its own).")
@handle_errors
def main(catalog_uri: str, storage_option: tuple[str, ...], keep_last: int | None,
         older_than: str | None, grace: str | None, dry_run: bool, force: bool,
         as_json: bool, spark_master: str) -> None:
    """Run the Olympia expiry job on the Spark cluster this process was submitted to."""
    from pyspark.sql import SparkSession

    if "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit: use its settings
        spark = SparkSession.builder.appName("olympia-expire").getOrCreate()
    else:
        spark = local_session(spark_master)
    policy = ExpirePolicy(keep_last, parse_duration(older_than) if older_than else None,
                          parse_duration(grace) if grace else None, force)
    result = expire_with_spark(spark, catalog_uri, parse_storage_options(storage_option),
                               policy, dry_run)
    click.echo(json.dumps(result.to_dict(), default=str) if as_json else report(result))
    if result.files_failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
