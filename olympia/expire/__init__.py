"""Version expiry and orphan-file removal: a PySpark job, plus the same run in one process.

- :class:`ExpirePolicy`, :func:`parse_duration` — what to keep (olympia/versions/policy.py);
- :func:`expire_with_spark` — the job on any SparkSession (olympia/expire/spark.py);
- :func:`expire_local` — the same run without Spark, for small catalogs (local.py);
- :class:`ExpireResult` — what a run did: ``to_dict()``, ``to_dataframe(spark)``.

``python -m olympia.expire`` (or ``spark-submit .../olympia/expire/__main__.py``) runs the job
from the command line; docs/EXPIRY.md explains the semantics and why it is safe.
"""

from olympia.expire.job import ExpireResult, FolderStats
from olympia.expire.local import expire_local
from olympia.expire.spark import expire_with_spark, local_session, result_dataframe
from olympia.versions.policy import ExpirePolicy, format_duration, parse_duration

__all__ = ["ExpirePolicy", "ExpireResult", "FolderStats", "expire_local", "expire_with_spark",
           "format_duration", "local_session", "parse_duration", "result_dataframe"]
