"""Spark for the expiry operator: its log lines at their own level in the task log, the
in-process session, and the job submitted to a cluster with ``spark-submit``.

Airflow logs whatever a task writes to stderr at error level; Spark writes all of its log4j
output there. :class:`SparkLogRelay` reads those lines and logs each at the level Spark gave
it (``yy/MM/dd HH:mm:ss LEVEL logger: message``, Spark's default console layout).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from airflow.sdk.exceptions import AirflowException

_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
TAIL_LINES = 20  # stderr lines kept for the error message of a failed job


class _Log(Protocol):
    def log(self, level: int, event: Any, *args: Any, **kw: Any) -> Any: ...


class SparkLogRelay:
    """Logs Spark's stderr lines at their own level; a line without one (a stack trace's
    continuation) keeps the level of the line before it, and is info at first."""

    def __init__(self, log: _Log) -> None:
        self.log = log
        self.level = logging.INFO
        self.tail: list[str] = []

    def line(self, text: str) -> None:
        text = text.rstrip("\n")
        if not text:
            return
        match = _LINE.match(text)
        if match:
            self.level = _LEVELS[match.group(1)]
        self.log.log(self.level, "spark: %s", text)
        self.tail = [*self.tail[-(TAIL_LINES - 1):], text]

    def pump(self, stream: IO[str]) -> threading.Thread:
        """Relay every line of ``stream`` from a daemon thread, until it ends."""

        def relay() -> None:
            for text in stream:
                self.line(text)

        thread = threading.Thread(target=relay, name="spark-log-relay", daemon=True)
        thread.start()
        return thread


@contextmanager
def relayed_stderr(relay: SparkLogRelay) -> Iterator[None]:
    """While inside, file descriptor 2 is a pipe read by ``relay``: a JVM started then (the
    in-process Spark session's) keeps writing its log there after the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    relay.pump(os.fdopen(read, encoding="utf-8", errors="replace"))
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def local_session(master: str, relay: SparkLogRelay) -> Any:
    """The in-process session of :func:`olympia.expire.local_session`, with the log of the
    JVM it starts relayed (a JVM this process already runs keeps its own stderr)."""
    from olympia.expire import local_session as make_session

    with relayed_stderr(relay):
        return make_session(master)


def spark_submit_binary(configured: str | None = None) -> str:
    """``configured``, else ``$SPARK_HOME/bin/spark-submit``, else the one pyspark ships,
    else ``spark-submit`` on PATH.

    Raises:
        FileNotFoundError: none of them exists.
    """
    candidates = [configured] if configured else []
    if os.environ.get("SPARK_HOME"):
        candidates.append(str(Path(os.environ["SPARK_HOME"]) / "bin" / "spark-submit"))
    try:
        import pyspark

        candidates.append(str(Path(pyspark.__file__).parent / "bin" / "spark-submit"))
    except ImportError:
        pass
    candidates.append("spark-submit")
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    raise FileNotFoundError(f"no spark-submit found (tried {', '.join(candidates)}); set "
                            "SPARK_HOME or the operator's spark_submit_binary")


def expiry_application() -> str:
    """The expiry job's entry point, the file spark-submit runs."""
    import olympia.expire

    return str(Path(olympia.expire.__file__).with_name("__main__.py"))


def submit_command(binary: str, master: str, job_args: Sequence[str],
                   conf: Mapping[str, str] | None = None,
                   name: str = "olympia-expire") -> list[str]:
    """The spark-submit command line (no secret on it: storage options travel in the
    ``OLYMPIA_STORAGE_OPTIONS`` environment variable of the driver)."""
    command = [binary, "--master", master, "--name", name]
    for key, value in sorted((conf or {}).items()):
        command += ["--conf", f"{key}={value}"]
    return [*command, expiry_application(), *job_args, "--json"]


def run_submit(command: Sequence[str], storage_options: Mapping[str, Any],
               relay: SparkLogRelay, on_start: Any = None) -> dict[str, Any]:
    """Run ``command`` (from :func:`submit_command`), relay its log, return the job's result
    (its JSON output). ``on_start(process)`` is called once it runs (to kill it on demand).

    Raises:
        AirflowException: it exited with an error, or printed no result.
    """
    env = {**os.environ, "OLYMPIA_STORAGE_OPTIONS": json.dumps(dict(storage_options))}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env) as process:
        if on_start is not None:
            on_start(process)
        assert process.stderr is not None and process.stdout is not None
        pump = relay.pump(process.stderr)
        output = process.stdout.read()
        process.wait()
        pump.join()
    result = _last_json_object(output)
    if result is not None and isinstance(result.get("files_failed"), int):
        return result  # the job reports failed deletions itself (exit 1, result printed)
    tail = "\n".join(relay.tail[-5:])
    raise AirflowException(f"spark-submit exited with code {process.returncode} and no "
                           f"result; last log lines:\n{tail}")


def _last_json_object(output: str) -> dict[str, Any] | None:
    """The JSON object the job printed last (``--json`` prints one, over several lines)."""
    start = output.rfind("\n{")
    text = output[start + 1:] if start >= 0 else output
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
