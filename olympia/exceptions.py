"""The error hierarchy of Olympia: every error the library raises derives from OlympiaError."""

from __future__ import annotations


class OlympiaError(Exception):
    """Base class of every Olympia error."""


# --- storage -------------------------------------------------------------------------


class StorageError(OlympiaError):
    """A storage operation failed; ``path`` names the file (full URI) it was about."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{message}: {path}" if path else message)
        self.path = path


class FileNotFound(StorageError):
    """The file does not exist."""


class FileAlreadyExists(StorageError):
    """An exclusive create lost: the file already exists."""


class FileChanged(StorageError):
    """A file a write was conditional on no longer holds the content it was read with;
    ``digest`` is the SHA-256 (hex) of what it holds now, None when it is gone."""

    def __init__(self, message: str, path: str = "", digest: str | None = None) -> None:
        super().__init__(message, path)
        self.digest = digest


class TransientStorageError(StorageError):
    """A failure that may go away on retry (throttling, timeouts, connection resets)."""


class InsufficientStorageError(StorageError):
    """The store has no room for a write: it is full (or over a quota), or the file is
    larger than it allows. Trying again does not help until its operator acts."""


class PartialDeleteError(StorageError):
    """A bulk delete left files in place: ``errors`` maps each (catalog-relative path) to its
    own error, a :class:`TransientStorageError` where a retry may succeed."""

    def __init__(self, errors: dict[str, StorageError]) -> None:
        shown = "; ".join(str(e) for e in list(errors.values())[:3])
        more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
        super().__init__(f"{len(errors)} files not deleted: {shown}{more}")
        self.errors = errors


# --- format --------------------------------------------------------------------------


class CorruptFileError(OlympiaError):
    """A node, definition or version file does not follow the format."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt file {path}: {reason}")
        self.path = path
        self.reason = reason


class TableMetadataError(CorruptFileError):
    """A table's own metadata file (Iceberg), which the catalog or the caller names, is
    missing or does not follow its format; ``path`` names the file."""


# --- catalog -------------------------------------------------------------------------


class CatalogError(OlympiaError):
    """A catalog operation was refused."""


class InvalidNameError(CatalogError, ValueError):
    """An object name breaks the format's naming rules."""


class InvalidArgumentError(CatalogError, ValueError):
    """An argument is malformed (bad type spelling, bad option value, ...)."""


class NotFoundError(CatalogError, KeyError):
    """The catalog, namespace, table, view, version or export does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NoSuchCatalogError(NotFoundError):
    """No Olympia catalog exists at the URI."""


class NoSuchNamespaceError(NotFoundError):
    """The namespace does not exist."""


class NoSuchTableError(NotFoundError):
    """The table does not exist."""


class NoSuchViewError(NotFoundError):
    """The view does not exist."""


class NoSuchColumnError(NotFoundError):
    """The column does not exist in its table."""


class NoSuchVersionError(NotFoundError):
    """The catalog version does not exist (yet)."""


class VersionExpiredError(NoSuchVersionError):
    """The catalog version existed but has been expired (it is below ``vn/oldest``)."""


class NoSuchExportError(NotFoundError):
    """No export of that name is recorded in the catalog."""


class NoSuchTransactionError(NotFoundError):
    """No saved distributed transaction of that id exists."""


class AlreadyExistsError(CatalogError):
    """The object already exists."""


class NamespaceNotEmptyError(CatalogError):
    """A namespace still holds tables or views and cascade was not requested."""


class ProtectedObjectError(CatalogError):
    """The object is marked protected and cannot be dropped."""


class ReadOnlyError(CatalogError):
    """A write was attempted on a read-only (time-travel) view of the catalog."""


class CommitConflict(CatalogError):
    """A concurrent commit changed what this transaction depends on.

    ``object_name`` is the conflicting object and ``version`` the version that won.
    """

    def __init__(self, message: str, object_name: str = "", version: int | None = None) -> None:
        super().__init__(message)
        self.object_name = object_name
        self.version = version


class CommitOutcomeUnknown(CatalogError):
    """Whether a commit landed is unknown: an exception such as a task timeout interrupted
    it once its root's create may have happened (with ``coalesce_commits``: also once its
    change was in a batch being landed, or when the thread landing that batch was). It has
    landed, or it never will: refresh and look. The interrupt is its ``__cause__``."""


class TableLocationError(CatalogError, ValueError):
    """A table location derived from a name would leave its warehouse (or namespace
    location)."""


class LocationInUseError(TableLocationError):
    """A table location or metadata file is used by another live table, ``other``."""

    def __init__(self, message: str, other: str = "") -> None:
        super().__init__(message)
        self.other = other


class TransactionExpiredError(CatalogError):
    """A distributed transaction is past its expiry time."""


# --- catalog-as-code -----------------------------------------------------------------


class SpecError(OlympiaError):
    """One or more spec documents are invalid; ``problems`` lists each as file:line:col."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class StalePlanError(CatalogError):
    """A saved plan no longer matches the catalog it was computed against."""


class DestructiveChangeError(CatalogError):
    """A plan holds destructive actions and they were not explicitly allowed."""


# --- expiry --------------------------------------------------------------------------


class ExpiryAbortedError(OlympiaError):
    """An expiry run stopped (unreadable node, damaged catalog, failed job step); the
    message says whether anything had been deleted. Re-running is always safe."""


class ProtectedDropError(DestructiveChangeError, ProtectedObjectError):
    """A plan would drop or replace objects that are protected in the catalog; refused even
    when destructive changes are allowed."""
