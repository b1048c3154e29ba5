"""Host turns: the writers of one catalog on remote storage that run on one host take
turns to commit, and each reads what the writers before it landed from a copy on this
host, not from the store.

On S3 a writer that loses the root race has spent its requests for nothing, and learns
what won with more (a root read each). Writers on one host (an Airflow worker's tasks,
a Spark driver's jobs) can avoid racing one another: :meth:`HostTurns.hold` is an advisory
lock (``flock``) on a file in a folder of this host kept for the catalog, and a writer that
holds it and lands a version copies the files it created there (:meth:`HostTurns.put`).
The next holder tells that those versions exist and reads their roots and nodes from the
copies (:meth:`HostTurns.has`, :meth:`HostTurns.get`), so it catches up without a request
and lands at its first try, unless a writer on another host took the version.

The writer that lands a version also notes it here (:meth:`HostTurns.note`: the version
and a body, the actions it recorded), appended to a file shared by every process, so a
writer catching up on its neighbours' versions reads their notes, one read for many, and
parses only the newest root, not every one in between.

Nothing here decides a race: the store's exclusive create does, so a writer that cannot
take the turn (its wait ran out, the folder is unusable) goes on without it. A copy is
only made of a file already created on the store, so a name found here is a file that
exists (or existed) there; every copy carries a SHA-256 of its content and one that does
not match is ignored and removed, so a torn copy costs a request, never a wrong read. The
folder is keyed by the store's place and the catalog's id, so a catalog created again at
the same place never meets the copies of the one before. It holds about
:data:`COPIES_KEPT` copies (each process looks every :data:`PRUNE_EVERY` puts), and the base
folder at most :data:`CATALOGS_KEPT` catalogs'.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from functools import partial

from olympia.storage.backends import holding, note_held, release_turn, try_flock

HOST_TURN_WAIT_S = 2.0  # the longest a writer waits for its host turn (holders take ms)
HOST_TURN_URGENT_S = 0.2  # a writer waiting this long goes first (see _Wait)
URGENT_NAP_S = 0.005  # how often a long waiter looks whether it may go first
STALLED_WAITS_MAX = 4  # waits left behind for stalled holders; beyond, writers do not wait
COPIES_KEPT = 512  # copies of landed files kept per catalog (pruned to half beyond it)
PRUNE_EVERY = 32  # a process looks whether to prune after this many of its puts
CATALOGS_KEPT = 64  # catalogs' folders kept in the base folder (the least used go first)
LETTER_MAX_BYTES = 16 * 1024 * 1024  # a letter (one process's changes) read at most
LETTERS_PER_TURN = 64  # letters a holder takes at once (the others wait for the next)
LETTER_FORGOTTEN_S = 600.0  # a letter or answer nobody took for this long is removed
NOTES_PER_FILE = 4096  # versions whose notes share one file (the two newest files are kept)
NOTE_MAX_BYTES = 1024 * 1024  # a larger note is not written (readers read the root instead)
NOTES_KEPT = 2 * NOTES_PER_FILE  # notes a process keeps in memory
_NOTE_HEAD = struct.Struct(">QI")  # a note's version and length (then its body and digest)
_DIGEST = hashlib.sha256().digest_size


def default_base() -> str:
    """This user's folder for host turns under the system's temporary folder."""
    return os.path.join(tempfile.gettempdir(), f"olympia-{os.getuid()}")


class HostTurns:
    """The turn and the copies of one catalog's landed files on this host, and the letters
    its coalescing writers leave for the holder of the turn (the host turn on remote
    storage, the local turn on local disk: :meth:`post`, :meth:`claim`, :meth:`answer`,
    :meth:`reply`).

    Args:
        base: The folder holding every catalog's (created, mode 0700; a folder that is
            not this user's own, or that others may write, is not used).
        key: What identifies the catalog: its store's place and its id.
    """

    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.folder = os.path.join(base, hashlib.sha256(key.encode()).hexdigest()[:32])
        self._usable: bool | None = None  # known once the folder was made
        self._holder: int | None = None  # the process whose thread holds the turn
        self._puts = 0
        self._notes: dict[int, bytes] = {}  # version -> note, read so far
        self._read_to: dict[int, int] = {}  # notes file -> how far it was read
        self._notes_lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, wait: bool = True) -> Iterator[bool]:
        """Wait for the turn (at most :data:`HOST_TURN_WAIT_S`; without ``wait``, only take
        it if it is free at once) and hold it for the block; yields whether it is held (a
        thread already holding it holds it on)."""
        with holding(self.folder, partial(self._take, wait)) as held:
            outermost = held and not self.held()
            if outermost:
                self._holder = os.getpid()
            try:
                yield held
            finally:
                if outermost:
                    self._holder = None

    def hold_local(self, path: str) -> contextlib.AbstractContextManager[bool]:
        """Hold the local writers' turn of ``path``'s folder (see
        :meth:`olympia.storage.backends.LocalBackend.hold_turn`), waiting for it in the
        kernel as for the host turn (at most :data:`HOST_TURN_WAIT_S`, the longest waiter
        first): a writer waiting for an answer to its letter costs no CPU."""
        folder = os.path.dirname(path) or "."
        return holding(folder, lambda: self._lock(folder, os.O_RDONLY | os.O_DIRECTORY))

    def held(self) -> bool:
        """Whether a thread of this process holds the turn (the holder's reads may run on
        other threads: :meth:`olympia.storage.Storage.map_reads`)."""
        return self._holder == os.getpid()

    def has(self, path: str) -> bool:
        """Whether a holder copied ``path`` here: it exists on the store (or did)."""
        return self._ready() and os.path.isfile(self._copy(path))

    def get(self, path: str) -> bytes | None:
        """The copy of ``path``, or None (none, or one whose digest does not match: it is
        removed)."""
        copy = self._copy(path)
        try:
            if not self._ready():
                return None
            with open(copy, "rb") as f:
                data = f.read()
        except OSError:
            return None
        body, digest = data[:-_DIGEST], data[-_DIGEST:]
        if len(data) >= _DIGEST and hashlib.sha256(body).digest() == digest:
            return body
        with contextlib.suppress(OSError):
            os.unlink(copy)
        return None

    def put(self, files: Mapping[str, bytes]) -> None:
        """Copy ``files``, each created on the store already, here (by the turn's holder;
        not synced: a copy a crash tears is ignored). Copies beyond :data:`COPIES_KEPT`
        are pruned, oldest first, to half of it (looked at every :data:`PRUNE_EVERY` puts)."""
        if not self._ready():
            return
        try:
            for path, data in files.items():
                self._place(self._copy(path), data + hashlib.sha256(data).digest())
            self._prune()
        except OSError:
            pass  # the copies only save requests

    def post(self, body: bytes) -> str | None:
        """Leave a letter (``body``) for the holder of the turn (:meth:`claim`); its name,
        or None where the folder cannot be used."""
        if not self._ready():
            return None
        name = uuid.uuid4().hex
        try:
            self._place(self._letter("p", name), body)
        except OSError:
            return None
        return name

    def withdraw(self, name: str) -> bool:
        """Take a letter back: False if a holder has claimed it already."""
        try:
            os.unlink(self._letter("p", name))
        except OSError:
            return False
        return True

    def claim(self) -> list[tuple[str, bytes | None]]:
        """The letters left for the turn's holder, oldest first (at most
        :data:`LETTERS_PER_TURN`), now its own to :meth:`answer`: (name, body), the body
        None where it is over :data:`LETTER_MAX_BYTES` or unreadable. Letters and answers
        nobody took for :data:`LETTER_FORGOTTEN_S` are removed."""
        if not self._ready():
            return []
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return []
        posted: list[tuple[float, str]] = []
        forgotten = time.time() - LETTER_FORGOTTEN_S
        for entry in entries:
            kind, name = entry.name[:2], entry.name[2:]
            if kind not in ("p-", "c-", "a-") or not _is_digest(name, 32):
                continue
            with contextlib.suppress(OSError):
                modified = entry.stat(follow_symlinks=False).st_mtime
                if modified < forgotten:
                    os.unlink(entry.path)
                elif kind == "p-":
                    posted.append((modified, name))
        letters: list[tuple[str, bytes | None]] = []
        for _, name in sorted(posted)[:LETTERS_PER_TURN]:
            claimed = self._letter("c", name)
            try:
                os.rename(self._letter("p", name), claimed)
            except OSError:
                continue  # withdrawn meanwhile
            try:
                with open(claimed, "rb") as f:
                    body = f.read(LETTER_MAX_BYTES + 1)
            except OSError:
                body = b""
            letters.append((name, body if 0 < len(body) <= LETTER_MAX_BYTES else None))
        return letters

    def answer(self, name: str, body: bytes) -> None:
        """Answer a claimed letter (the holder, before it lets the turn go)."""
        with contextlib.suppress(OSError):
            self._place(self._letter("a", name), body)
            os.unlink(self._letter("c", name))

    def reply(self, name: str) -> bytes | None:
        """The answer to one's letter, once there (read once: it is removed)."""
        answer = self._letter("a", name)
        try:
            with open(answer, "rb") as f:
                body = f.read(LETTER_MAX_BYTES + 1)
            os.unlink(answer)
        except OSError:
            return None
        return body

    def note(self, version: int, body: bytes) -> None:
        """Note ``body`` for ``version``, a version this process just created on the store
        (best effort, not synced: a note a crash tears is ignored). The note is one
        appended record (version, length, body, SHA-256 of all three) in the file of
        :data:`NOTES_PER_FILE` versions; the writer that starts a file removes the ones
        before the previous."""
        if len(body) > NOTE_MAX_BYTES or not self._ready():
            return
        head = _NOTE_HEAD.pack(version, len(body))
        record = head + body + hashlib.sha256(head + body).digest()
        number = version // NOTES_PER_FILE
        try:
            fd = os.open(self._notes_file(number), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                started = os.fstat(fd).st_size == 0
                os.write(fd, record)  # one append: records of other processes never interleave
            finally:
                os.close(fd)
            if started:
                for entry in os.scandir(self.folder):
                    if (entry.name.startswith("n-") and _is_digest(entry.name[2:], 32)
                            and int(entry.name[2:], 16) < number - 1):
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
        except OSError:
            pass  # notes only save parsing roots

    def noted(self, version: int) -> bytes | None:
        """The note of ``version`` (:meth:`note`), if a writer on this host left one: the
        notes written since the last look are read first. None if there is none (the
        writer that created the version is on another host, or died before noting it)."""
        with self._notes_lock:
            found = self._notes.get(version)
            if found is None and self._ready():
                self._read_notes(version // NOTES_PER_FILE)
                found = self._notes.get(version)
            return found

    def _read_notes(self, number: int) -> None:
        """Read the notes file ``number`` from where the last look stopped; a record not
        complete (being appended) is left for the next look, and so is one whose digest
        does not match until records follow it (then it is skipped: a torn record)."""
        start = self._read_to.get(number, 0)
        try:
            with open(self._notes_file(number), "rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            return
        at = 0
        while len(data) - at >= _NOTE_HEAD.size:
            version, length = _NOTE_HEAD.unpack_from(data, at)
            end = at + _NOTE_HEAD.size + length + _DIGEST
            if length > NOTE_MAX_BYTES or end > len(data):
                break
            body = data[at + _NOTE_HEAD.size:end - _DIGEST]
            if hashlib.sha256(data[at:end - _DIGEST]).digest() == data[end - _DIGEST:end]:
                self._notes[version] = body
            elif end == len(data):
                break  # maybe still being written: looked at again next time
            at = end
        self._read_to[number] = start + at
        if len(self._notes) > NOTES_KEPT:
            newest = max(self._notes)
            self._notes = {v: b for v, b in self._notes.items() if v > newest - NOTES_KEPT // 2}

    def _notes_file(self, number: int) -> str:
        return os.path.join(self.folder, f"n-{number:032x}")

    def _letter(self, kind: str, name: str) -> str:
        return os.path.join(self.folder, f"{kind}-{name}")

    def _place(self, path: str, body: bytes) -> None:
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(body)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _copy(self, path: str) -> str:
        return os.path.join(self.folder, hashlib.sha256(path.encode()).hexdigest()[:40])

    def _take(self, wait: bool = True) -> int | None:
        """The turn file's descriptor, locked; None if not taken (see :meth:`hold`)."""
        return self._lock(os.path.join(self.folder, "turn"), os.O_RDONLY | os.O_CREAT, wait)

    def _lock(self, path: str, flags: int, wait: bool = True) -> int | None:
        """``path`` opened (``flags``) and locked through :class:`_Wait`, with this
        folder's urgent lock (without ``wait``, only if free at once); None if not
        taken."""
        if not self._ready():
            return None
        try:
            fd = os.open(path, flags, 0o600)
        except OSError:
            self._usable = None  # the folder went (pruned by another process): made again
            return None
        note_held(fd)  # a child forked while this thread waits closes its copy
        try:
            if not wait:
                if try_flock(fd, fcntl.LOCK_EX):
                    return fd
            elif _Wait.lock(fd, os.path.join(self.folder, "urgent")):
                return fd
            return None  # the wait ran out: ``fd`` is the waiting thread's now
        except FileNotFoundError:
            self._usable = None  # the folder went meanwhile: made again next time
        except OSError:  # no advisory locks on this file system
            self._usable = False
        release_turn(fd)
        return None

    def _ready(self) -> bool:
        """Whether the folder is there and safe to use (made on first use)."""
        if self._usable is None:
            self._usable = _own_folder(self.base) and _own_folder(self.folder)
            if self._usable:
                with contextlib.suppress(OSError):  # marks the folder as one of ours
                    os.close(os.open(os.path.join(self.folder, "turn"), os.O_CREAT, 0o600))
                _forget_unused(self.base, keep=self.folder)
        return self._usable

    def _prune(self) -> None:
        self._puts += 1
        if self._puts % PRUNE_EVERY:
            return  # listing the folder at every put took a tenth of the turn
        entries = [e for e in os.scandir(self.folder) if _is_digest(e.name, 40)]
        if len(entries) <= COPIES_KEPT:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for entry in entries[: len(entries) - COPIES_KEPT // 2]:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


class _Wait:
    """A wait for the turn's lock in the kernel: a waiter costs no CPU and takes the turn as
    soon as the holder lets go. ``flock`` has no timeout, so the wait runs on a thread of
    its own, and the writer waits for it at most :data:`HOST_TURN_WAIT_S`. A wait that runs
    out is left to its thread, which lets the lock go as soon as it gets it and closes the
    descriptor; at most :data:`STALLED_WAITS_MAX` are left at once (a holder stalled for
    long would otherwise leave a thread per attempt), and beyond that a writer goes on
    without the turn.

    The kernel wakes every waiter when the turn is let go, and whichever runs first takes
    it, so a writer may lose many handoffs in a row. One that has waited
    :data:`HOST_TURN_URGENT_S` takes the ``urgent`` lock (exclusive, one writer at a time);
    every writer passes that lock (shared, at once) before it waits for the turn, so while
    one holds it newcomers stay out, and it competes only with the writers already waiting:
    it goes within as many handoffs as there were. It lets go once it has the turn.
    """

    _left = 0  # waits left to their threads, not over yet
    _left_lock = threading.Lock()

    def __init__(self, fd: int, urgent: str) -> None:
        self.fd, self.urgent = fd, urgent
        self.done = threading.Event()
        self.past_urgent = threading.Event()  # this wait's thread passed the urgent lock
        self.guard = threading.Lock()
        self.abandoned = False
        self.error: OSError | None = None

    @classmethod
    def lock(cls, fd: int, urgent: str) -> bool:
        """Lock ``fd`` (exclusive), at once or within :data:`HOST_TURN_WAIT_S`; ``urgent``
        is the path of the urgent lock's file. False if not, and then ``fd`` is no longer
        the caller's to close.

        Raises:
            OSError: The file system offers no such locks (``fd`` is still the caller's).
        """
        if _lock_now(urgent, fcntl.LOCK_SH) and try_flock(fd, fcntl.LOCK_EX):
            return True
        with cls._left_lock:
            if cls._left >= STALLED_WAITS_MAX:
                release_turn(fd)
                return False
        wait = cls(fd, urgent)
        threading.Thread(target=wait._run, name="olympia-host-turn", daemon=True).start()
        first = None  # the urgent lock, once this writer holds it
        start = time.monotonic()
        end, urgent_at = start + HOST_TURN_WAIT_S, start + HOST_TURN_URGENT_S
        try:
            while not wait.done.is_set() and (now := time.monotonic()) < end:
                if now < urgent_at:
                    wait.done.wait(min(end, urgent_at) - now)
                    continue
                if first is None and wait.past_urgent.is_set():
                    first = _urgent(urgent)
                wait.done.wait(min(URGENT_NAP_S, end - now))
        finally:
            release_turn(first)
        with wait.guard:
            if not wait.done.is_set():
                wait.abandoned = True
                with cls._left_lock:
                    cls._left += 1
                return False
        if wait.error is not None:
            raise wait.error
        return True

    def _run(self) -> None:
        try:
            gate = os.open(self.urgent, os.O_RDONLY | os.O_CREAT, 0o600)
            note_held(gate)
            try:  # wait while a writer that waited long goes first
                fcntl.flock(gate, fcntl.LOCK_SH)
            finally:
                release_turn(gate)
            self.past_urgent.set()
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self.guard:
            if not self.abandoned:
                self.done.set()
                return
        release_turn(self.fd)  # a wait that ran out: let go at once
        with _Wait._left_lock:
            _Wait._left -= 1

    @classmethod
    def forget(cls) -> None:
        """In a forked child: the parent's waiting threads are not its own."""
        cls._left, cls._left_lock = 0, threading.Lock()


def _lock_now(path: str, kind: int) -> bool:
    """Whether the lock of the file ``path`` could be taken (``kind``) at once: a look
    (let go at once)."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        return try_flock(fd, kind)
    finally:
        os.close(fd)


def _urgent(path: str) -> int | None:
    """The urgent lock's descriptor, locked (exclusive) at once, or None (another writer
    holds it, one waiting for the turn is passing it, or the file cannot be had: the
    writer then waits as the others do)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    except OSError:
        return None
    note_held(fd)
    try:
        if try_flock(fd, fcntl.LOCK_EX):
            return fd
    except OSError:
        pass
    release_turn(fd)
    return None


os.register_at_fork(after_in_child=_Wait.forget)


def _own_folder(path: str) -> bool:
    """Make ``path`` (mode 0700) if missing; whether it is a folder of this user's that
    nobody else may write (not a link)."""
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _is_digest(name: str, length: int) -> bool:
    """Whether ``name`` is one this module gives (``length`` lowercase hex digits): nothing
    else in a folder, which the ``host_dir`` option may name, is ever removed."""
    return len(name) == length and all(c in "0123456789abcdef" for c in name)


def _forget_unused(base: str, keep: str) -> None:
    """Remove the least recently used catalogs' folders beyond :data:`CATALOGS_KEPT` (only
    folders named as this module names them, holding a turn file)."""
    try:
        folders = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False)
                   and e.path != keep and _is_digest(e.name, 32)
                   and os.path.isfile(os.path.join(e.path, "turn"))]
        if len(folders) < CATALOGS_KEPT:
            return
        folders.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
        for entry in folders[: len(folders) - CATALOGS_KEPT + 1]:
            shutil.rmtree(entry.path, ignore_errors=True)
    except OSError:
        pass
