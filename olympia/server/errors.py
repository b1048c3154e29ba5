"""Errors as the Iceberg REST specification's ``ErrorModel``: ``{"error": {"message",
"type", "code"}}`` with the status code and exception type name each client maps back to its
own exception (``NoSuchTableException`` → pyiceberg's ``NoSuchTableError``, Java's
``NoSuchTableException``).

A user error is answered with its message and never a traceback; an unexpected error is
answered with a generic message (its traceback goes to the server's log only).
"""

from __future__ import annotations

from pyiceberg import exceptions as ice
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from starlette.responses import JSONResponse, Response

from olympia import exceptions as oe

# (exception class, HTTP status, ErrorModel type); the first match wins, so subclasses first.
_MAPPING: tuple[tuple[type[BaseException], int, str], ...] = (
    # a table whose metadata file is missing or corrupt exists but cannot be served: not a
    # 404, which clients read as "no such table" (HEAD still answers that it exists)
    (oe.CorruptFileError, 500, "CorruptFileException"),
    (ice.NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (oe.NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    # a transaction is the namespace sys.dtxns.<id> to Iceberg clients
    (oe.NoSuchTransactionError, 404, "NoSuchNamespaceException"),
    (ice.NoSuchTableError, 404, "NoSuchTableException"),
    (oe.NoSuchTableError, 404, "NoSuchTableException"),
    (ice.NoSuchViewError, 404, "NoSuchViewException"),
    (oe.NoSuchViewError, 404, "NoSuchViewException"),
    (ice.NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (ice.TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (ice.ViewAlreadyExistsError, 409, "AlreadyExistsException"),
    (oe.AlreadyExistsError, 409, "AlreadyExistsException"),
    (ice.NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (oe.NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (ice.CommitFailedException, 409, "CommitFailedException"),
    (oe.CommitConflict, 409, "CommitFailedException"),
    # a caller interrupted after its change was handed to a batch: as Iceberg clients read a
    # 500 to a commit, the change may or may not have landed
    (oe.CommitOutcomeUnknown, 500, "CommitStateUnknownException"),
    (oe.ReadOnlyError, 403, "ForbiddenException"),
    (oe.ProtectedObjectError, 403, "ForbiddenException"),
    (NotImplementedError, 406, "UnsupportedOperationException"),
    # the store has no room for a write (full, file too large): no retry helps
    (oe.InsufficientStorageError, 507, "InsufficientStorageException"),
    (oe.StorageError, 503, "ServiceUnavailableException"),
    (oe.CatalogError, 400, "BadRequestException"),
    (IcebergValidationError, 400, "BadRequestException"),
    (ValueError, 400, "BadRequestException"),
)

RETRY_AFTER_SECONDS = 1


class RestError(Exception):
    """A request the server refuses, with the status and ErrorModel type to answer.

    Args:
        status: The HTTP status.
        error_type: The ErrorModel ``type`` (an exception name clients know).
        message: What went wrong, in words a user can act on.
    """

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


#: Every exception class answered with its own message (the others are unexpected).
EXPECTED: tuple[type[BaseException], ...] = (RestError, *(kind for kind, _, _ in _MAPPING))


def bad_request(message: str) -> RestError:
    """A 400 ``BadRequestException``."""
    return RestError(400, "BadRequestException", message)


def error_response(status: int, error_type: str, message: str, *,
                   head: bool = False) -> Response:
    """The ErrorModel JSON for an error (no body for a ``HEAD`` request).

    Args:
        status: The HTTP status.
        error_type: The ErrorModel ``type``.
        message: The message.
        head: Whether the request was a ``HEAD`` (its answer has no body).

    Returns:
        The response; a 503 carries ``Retry-After``.
    """
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    if head:
        return Response(status_code=status, headers=headers)
    body = {"error": {"message": message, "type": error_type, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def response_for(exc: BaseException, *, head: bool = False) -> Response:
    """The ErrorModel response for an exception raised while serving a request.

    Args:
        exc: The exception.
        head: Whether the request was a ``HEAD``.

    Returns:
        The mapped status and type with the exception's message; anything else is answered
        500 with a generic message (the ASGI server logs its traceback).
    """
    if isinstance(exc, RestError):
        return error_response(exc.status, exc.error_type, exc.message, head=head)
    for kind, status, error_type in _MAPPING:
        if isinstance(exc, kind):
            return error_response(status, error_type, str(exc) or type(exc).__name__,
                                  head=head)
    return error_response(500, "InternalServerError",
                          "internal server error (the server's log has the details)",
                          head=head)

