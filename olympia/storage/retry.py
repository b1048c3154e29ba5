"""Olympia's own storage settings (retry budget, timeouts, concurrency) and how a storage
failure is classified: missing, already existing, transient (tried again), a store that
has no room for the write (full, file too large) or permanent."""

from __future__ import annotations

import contextlib
import errno
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    InsufficientStorageError,
    InvalidArgumentError,
    StorageError,
    TransientStorageError,
)

DEFAULT_CONCURRENCY = 16
REMOVED_OPTIONS = ("host_turns", "host_dir")  # refused by name (docs/ARCHITECTURE.md)


@dataclass(frozen=True)
class StorageSettings:
    """Olympia's own storage options (every other option goes to the backend).

    ``retry_attempts`` bounds how often one operation is tried when it fails transiently;
    the pauses between tries start at ``retry_backoff`` seconds and double (jittered, at most
    ``MAX_BACKOFF``). On S3, ``connect_timeout`` and ``read_timeout`` (seconds) bound each
    request, which botocore and s3fs then do not retry themselves: a dead endpoint fails
    after ``retry_attempts`` quick tries instead of their nested retries (30-45 s).
    The removed options ``host_turns`` and ``host_dir`` are refused with an error saying
    so (:data:`REMOVED_OPTIONS`): writers share nothing outside the catalog prefix.
    """

    max_concurrency: int = DEFAULT_CONCURRENCY
    retry_attempts: int = 5
    retry_backoff: float = 0.1
    connect_timeout: float = 2.0
    read_timeout: float = 15.0

    @classmethod
    def pop(cls, options: dict[str, Any]) -> StorageSettings:
        """Take (and validate) the settings out of ``options``.

        Raises:
            InvalidArgumentError: a setting is not a number in its range, or is a removed
                option (named by key; the value is never echoed).
        """
        ints: dict[str, tuple[float, float]] = {"max_concurrency": (1, 1024),
                                                "retry_attempts": (1, 100)}
        floats: dict[str, tuple[float, float]] = {
            "retry_backoff": (0.0, 60.0), "connect_timeout": (0.001, 3600.0),
            "read_timeout": (0.001, 3600.0)}
        values: dict[str, Any] = {}
        for key in REMOVED_OPTIONS:
            if key in options:
                raise InvalidArgumentError(
                    f"storage option {key} was removed: writers no longer keep state on "
                    "their host (every commit reads what it builds on from the catalog "
                    "prefix); drop the option")
        for key, (low, high) in {**ints, **floats}.items():
            if key not in options:
                continue
            value: Any = options.pop(key)
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    value = int(value) if key in ints else float(value)
            number = isinstance(value, int) or (key in floats and isinstance(value, float))
            if isinstance(value, bool) or not number or not low <= value <= high:
                kind = "an integer" if key in ints else "a number"
                raise InvalidArgumentError(
                    f"storage option {key} must be {kind} from {low} to {high}")
            values[key] = value
        return cls(**values)

    def pause(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        return float(min(MAX_BACKOFF, self.retry_backoff * 2**attempt)) * random.uniform(0.5, 1)


MAX_BACKOFF = 2.0


# How storage errors are told apart, from what the error carries (never from free text):
# errno values (s3fs's translations: 503 SlowDown and 409 -> EBUSY, 500 -> EREMOTEIO),
# S3 error codes and HTTP status codes (botocore's ``response``, on the error or its cause),
# and the classes of network failures (by name: botocore and aiohttp are not imported here).
TRANSIENT_ERRNOS = frozenset({errno.EBUSY, errno.EREMOTEIO, errno.EAGAIN, errno.ETIMEDOUT,
                              errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED,
                              errno.EPIPE, errno.ENETUNREACH, errno.EHOSTUNREACH})
TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
                             "RequestThrottled", "TooManyRequests", "RequestLimitExceeded",
                             "RequestTimeout", "RequestTimeoutException", "InternalError",
                             "ServiceUnavailable", "ConditionalRequestConflict",
                             "OperationAborted"})
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# a store without room for the write: disk full or over quota, a file larger than the file
# system or the process (RLIMIT_FSIZE) allows; on S3 an object larger than the store
# accepts, a quota reached, a store out of space (MinIO's code, HTTP 507). A read-only
# store is not one: S3 servers answer it as they answer other failures (SeaweedFS: 500
# InternalError), so a read-only file system (EROFS) is the permanent StorageError too.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
FULL_CODES = frozenset({"EntityTooLarge", "QuotaExceeded", "XMinioStorageFull",
                        "InsufficientStorage", "507"})
FULL_STATUS = 507
EXISTS_CODES = frozenset({"PreconditionFailed", "412"})
MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
TRANSIENT_CLASSES = frozenset({
    "ConnectTimeoutError", "ReadTimeoutError", "EndpointConnectionError",
    "ConnectionClosedError", "ResponseStreamingError", "IncompleteRead",
    "ServerDisconnectedError", "ClientConnectorError", "ClientPayloadError", "FSTimeoutError"})
# botocore's message for a code it has no response object left for (s3fs drops the cause of
# some errors, e.g. a HEAD request's 502): "An error occurred (502) when calling the ..."
BOTOCORE_MESSAGE = re.compile(r"An error occurred \((\w+)\) when calling the \w+ operation")

Kind = type[StorageError]


def _chain(exc: BaseException) -> Iterable[BaseException]:
    """The error and the errors it was raised from or while handling (unless suppressed with
    ``from None``); bounded, as chains may loop."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__)


def kind_of_code(code: str, status: int | None = None) -> Kind:
    """The kind of failure an S3 error ``code`` (or an HTTP ``status``) reports."""
    if code in EXISTS_CODES or status == 412:
        return FileAlreadyExists
    if code in MISSING_CODES or status == 404:
        return FileNotFound
    if code in FULL_CODES or status == FULL_STATUS:
        return InsufficientStorageError
    if code in TRANSIENT_CODES or (code.isdigit() and int(code) in TRANSIENT_STATUS) or (
            status in TRANSIENT_STATUS):
        return TransientStorageError
    return StorageError


def classify(error: BaseException | str) -> Kind:
    """Which StorageError an operation's failure becomes.

    Args:
        error: the exception a backend raised, or the ``Code: Message`` text a bulk delete
            reported for one key.

    Returns:
        FileNotFound, FileAlreadyExists, TransientStorageError (may go away on retry),
        InsufficientStorageError (the store has no room for the write) or StorageError
        (permanent).
    """
    if isinstance(error, str):
        return kind_of_code(error.partition(":")[0].strip())
    for exc in _chain(error):
        if isinstance(exc, StorageError):
            return type(exc)
        response = getattr(exc, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            return kind_of_code(str(response["Error"].get("Code") or ""),
                                 status if isinstance(status, int) else None)
        if isinstance(exc, FileNotFoundError):
            return FileNotFound
        if isinstance(exc, FileExistsError):
            return FileAlreadyExists
        if isinstance(exc, TimeoutError | ConnectionError) or any(
                cls.__name__ in TRANSIENT_CLASSES for cls in type(exc).__mro__):
            return TransientStorageError
        if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
            return TransientStorageError
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return InsufficientStorageError
    # s3fs's translation of a code it knows no errno for: OSError(EIO, botocore's message)
    found = isinstance(error, OSError) and error.errno == errno.EIO and BOTOCORE_MESSAGE.match(
        error.strerror or "")
    return kind_of_code(found.group(1)) if found else StorageError


def _not_deleted(why: str) -> Kind:
    """The error for a key a bulk delete left: transient or permanent by its S3 code."""
    return TransientStorageError if classify(why) is TransientStorageError else StorageError
