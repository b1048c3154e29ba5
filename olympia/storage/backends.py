"""The backend contract every storage scheme implements, and the helpers scheme modules
share. A backend takes full paths (the root joined with a relative path) and raises its own
errors; :class:`olympia.storage.Storage` adds the prefix, retries and error types.

The contract (:class:`Backend`) is the size of fsspec's or pyiceberg's FileIO: read, write,
create exclusively, replace if unchanged (compare-and-swap), exists, list, delete many, and
publish (write a commit's files, then create its root exclusively; the default does exactly
that). Each scheme's module (:mod:`olympia.storage.schemes` lists them) owns its backend
and the mapping of its options.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from olympia.exceptions import FileChanged, InvalidArgumentError

T = TypeVar("T")
Job = Callable[[], object]
# how a backend runs a batch of requests (calls of a Job): every call ends before it
# returns (Storage.map, or run_in_turn)
RunAll = Callable[[Callable[[Job], object], list[Job]], object]


def run_in_turn(fn: Callable[[Job], object], items: list[Job]) -> None:
    """A :data:`RunAll` that runs the calls one after the other on this thread."""
    for item in items:
        fn(item)


def _run(job: Job) -> object:
    return job()


@dataclass(frozen=True)
class FileInfo:
    """A listed file: path relative to the prefix, size in bytes, modification epoch seconds."""

    path: str
    size: int
    modified: float


class Backend:
    """What a storage system must offer; paths here are full backend paths.

    ``remote``: each operation is a request over the network (a round trip). Where it is
    not, batches of small reads run on the calling thread and existence checks are free.
    """

    remote: bool = False

    def read(self, path: str) -> bytes:
        """The file's content.

        Raises:
            FileNotFoundError: There is no such file.
        """
        raise NotImplementedError

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        """Create or replace the file; a reader sees the old or the new content, never a
        mix. ``durable=False`` (hints) may skip syncing it to disk."""
        raise NotImplementedError

    def create_exclusive(self, path: str, data: bytes) -> None:
        """Create the file only if it does not exist (put-if-absent), whole or not at all.

        Raises:
            FileExistsError: The file exists.
        """
        raise NotImplementedError

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        """Replace the file's content with ``data`` only if it holds ``expected`` at that
        moment (compare-and-swap), whole or not at all.

        Raises:
            FileExistsError: The file holds something else (another writer replaced it).
            FileNotFoundError: There is no such file.
        """
        raise NotImplementedError

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The file's content and a tag of that content, or ``(None, tag)`` when the file
        still has the content ``tag`` was given with (``""``: read it in any case): a
        conditional read, which sends no body when nothing changed. By default the file
        is read in full (:meth:`read`) and given no tag, so a caller always reads it.

        Raises:
            FileNotFoundError: There is no such file.
        """
        return self.read(path), ""

    def tag(self, path: str) -> str:
        """The tag :meth:`read_if_changed` would give the file's content now, where telling
        costs no request; ``""`` (none) by default."""
        return ""

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def list(self, prefix: str) -> list[FileInfo]:
        """Every file whose full path starts with ``prefix`` (any order)."""
        raise NotImplementedError

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        """Delete the files (a missing file counts as deleted); the paths the storage did
        not delete, each with its error text."""
        raise NotImplementedError

    def place(self, root: str) -> Hashable:
        """What identifies the files under ``root`` in this store: two backends that give
        equal places address the same files."""
        raise NotImplementedError

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = (),
                unchanged: Mapping[str, str] | None = None, alongside: Sequence[Job] = (),
                ) -> None:
        """Write ``files``, check that each of ``present`` exists and that each file of
        ``unchanged`` still holds what it held, and run ``alongside`` (in one batch), then
        create ``path`` exclusively: a reader never finds ``path`` without every one of
        ``files`` and ``present``, and it is never created once a file of ``unchanged``
        changed or a call of ``alongside`` failed.

        Args:
            files: Full path -> content.
            path: The file created last, exclusively.
            data: Its content.
            run_all: Runs the batch, returning once every call has ended (the storage
                passes :meth:`~olympia.storage.Storage.map_requests`: its bounded thread
                pool on a remote store, the calling thread on local disk).
            present: Full paths of files written earlier that ``path`` also names.
            unchanged: Full path -> the SHA-256 (hex) of the content it must still hold.
            alongside: Other writes ``path``'s files need (files elsewhere they name),
                first in the batch: where they and a write of ``files`` both fail (a
                full disk), theirs is the failure raised.

        Raises:
            FileNotFoundError: A file of ``present`` is missing (``path`` was not created).
            FileChanged: A file of ``unchanged`` holds other content or is gone (``path``
                was not created; ``files`` were written).
            FileExistsError: ``path`` exists (``files`` were written).
        """
        self._batch([*alongside,
                     *(partial(self.write, name, content) for name, content in files.items())],
                    present, run_all, unchanged or {})
        self.create_exclusive(path, data)

    def _batch(self, writes: Sequence[Job], present: Sequence[str], run_all: RunAll,
               unchanged: Mapping[str, str]) -> None:
        """Run ``writes``, an existence check of each of ``present`` and a read of each
        of ``unchanged`` as one batch.

        Raises:
            FileNotFoundError: Naming the first missing file of ``present``.
            FileChanged: Naming the first file of ``unchanged`` that changed.
        """
        found: dict[str, bool] = {}
        held: dict[str, str | None] = {}

        def check(name: str) -> None:
            found[name] = self.exists(name)

        def digest(name: str) -> None:
            try:
                held[name] = hashlib.sha256(self.read(name)).hexdigest()
            except FileNotFoundError:
                held[name] = None

        run_all(_run, [*writes, *(partial(check, name) for name in present),
                       *(partial(digest, name) for name in unchanged)])
        missing = [name for name in present if not found[name]]
        if missing:
            raise FileNotFoundError(errno.ENOENT, "a file the new root names is missing",
                                    missing[0])
        for name, expected in unchanged.items():
            if held[name] != expected:
                raise FileChanged("a file the new root builds on changed", name, held[name])


Opened = tuple[str, Backend, str | None]
"""What a scheme's opener gives: the root (prefix with a trailing ``/``, as the backend
addresses it), the backend, and the canonical URI (None: as given)."""


def convert_property(prop: str, value: str, kind: str) -> Any:
    """A catalog property's string value as ``kind`` (``str``, ``bool`` or ``float``).

    Raises:
        InvalidArgumentError: The value has the wrong form (names the property, never the
            value).
    """
    if kind == "bool":
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidArgumentError(f"property {prop} must be true or false")
        return lowered == "true"
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            raise InvalidArgumentError(f"property {prop} must be a number of seconds") from None
    return value


def refuse_unknown(options: Mapping[str, Any], known: Sequence[str], scheme: str) -> None:
    """Refuse a storage option the scheme does not know (it could not be honoured).

    Raises:
        InvalidArgumentError: Naming the first unknown option and the known ones.
    """
    for key in options:
        if key not in known:
            raise InvalidArgumentError(
                f"storage option {key} is not one a {scheme}:// catalog knows "
                f"(known: {', '.join(sorted(known))})")


def flat_storage_options(properties: Mapping[str, Any], table: Mapping[str, str],
                         prefix: str, scheme: str) -> dict[str, Any]:
    """A scheme's storage options from pyiceberg properties, where each option is one
    property (``table``: property -> option).

    Raises:
        InvalidArgumentError: A property of the scheme's family (``prefix``) that has no
            option here (the catalog's files could not honour it).
    """
    out: dict[str, Any] = {}
    for prop, value in properties.items():
        if value is None:
            continue
        if prop in table:
            out[table[prop]] = str(value)
        elif prop.startswith(prefix):
            raise InvalidArgumentError(
                f"property {prop} is not supported for {scheme}:// catalogs "
                f"(supported: {', '.join(sorted(table))})")
    return out


def flat_properties(options: Mapping[str, Any], table: Mapping[str, str],
                    others: bool = False) -> dict[str, str]:
    """The inverse of :func:`flat_storage_options`: the options that are properties, as
    pyiceberg spells them; with ``others``, every other option too, as
    ``olympia.storage.<option>``."""
    inverse = {option: prop for prop, option in table.items()}
    return {inverse.get(key, f"olympia.storage.{key}"): _text(value)
            for key, value in options.items() if others or key in inverse}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def no_options(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options of a scheme no pyiceberg property configures: none."""
    return {}


def no_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """The FileIO properties of a scheme whose tables need none."""
    return {}


def passthrough(options: Mapping[str, Any]) -> dict[str, str]:
    """Data source properties of a scheme without pyiceberg counterparts: every option as
    ``olympia.storage.<option>``."""
    return flat_properties(options, {}, others=True)


class PerProcess(Generic[T]):
    """A client made anew in each process: a forked process never uses its parent's
    connections (the inherited client stays referenced, never used or closed)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._value = make()
        self._pid = os.getpid()
        self._inherited: list[T] = []

    def get(self) -> T:
        if self._pid != os.getpid():
            self._inherited.append(self._value)
            self._value, self._pid = self._make(), os.getpid()
        return self._value


def http_error(status: int | None, path: str, what: str) -> OSError | None:
    """The error a backend raises for a cloud store's HTTP ``status`` on ``path`` (None:
    keep the store's own error, a permanent failure): 404 missing, 412 a precondition
    that failed (the file exists or changed), 408, 429 and 5xx transient, 507 out of
    room."""
    if status == 404:
        return FileNotFoundError(errno.ENOENT, what, path)
    if status == 412:
        return FileExistsError(errno.EEXIST, what, path)
    if status == 507:
        return OSError(errno.ENOSPC, what, path)
    if status in (408, 429) or (status is not None and 500 <= status < 600):
        return OSError(errno.EAGAIN, what, path)
    return None
