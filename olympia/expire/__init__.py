"""Version expiry and orphan-file removal (PySpark job, plus a single-process engine)."""

from olympia.expire.local import expire_local
from olympia.expire.policy import ExpirePolicy, parse_duration
from olympia.expire.retention import ExpireResult
from olympia.expire.spark import expire_with_spark, local_session, result_dataframe

__all__ = ["ExpirePolicy", "ExpireResult", "expire_local", "expire_with_spark",
           "local_session", "parse_duration", "result_dataframe"]
