"""The expiry run: one ordering of steps, carried out by an engine (Spark or in-process).

The order is the safety argument (docs/EXPIRY.md spells it out):

1. **decide** the new oldest version from the policy (a few root reads);
2. **raise vn/oldest** to it — before anything is listed, walked or deleted — then let
   in-flight rollbacks and exports that checked the old value land (``settle_ms``);
3. **list** every file under the catalog's folders (files created later are never
   candidates);
4. **walk** everything reachable from the versions at or above the new oldest one (up to
   the latest version read *after* the listing), from the roots of live distributed
   transactions and from every export recorded by those versions, level by level with
   de-duplication; a missing or unreadable node, or a missing export or transaction root,
   aborts the run here;
5. **re-read the latest version** and walk anything committed meanwhile;
6. **classify**: listed minus reachable, restricted to files the format names, roots below
   the new oldest version, other files older than the grace period;
7. **delete** the Iceberg files of transactions expired past the grace period (their
   records still lead to them: :mod:`olympia.expire.txnfiles`), expired roots, then the
   other files; then **verify** by listing again.
   Right before each of the two deletes, ``vn/oldest`` is put back if a concurrent run
   lowered it, and the latest version and the live transactions' records are read again:
   versions committed since and running roots statements added since are walked, and if
   one reaches a file about to be deleted the run stops.

Nothing is deleted before step 7, ``vn/oldest`` only moves up, and every step is recomputed
from storage, so a run that crashes anywhere can simply be run again.

Over 400 lines: the steps above are one ordering, and their safety argument is easier to check
in one place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from olympia._proto import objects_pb2 as pb
from olympia.catalog.catalog import Catalog
from olympia.catalog.files import LATEST, OLDEST, CatalogFiles
from olympia.catalog.keys import path_version
from olympia.catalog.transaction import now_millis
from olympia.exceptions import ExpiryAbortedError, OlympiaError
from olympia.expire.reachability import (
    FOLDERS,
    Clock,
    DeleteReport,
    TxnRoots,
    effective_now,
    is_live,
    listing_prefixes,
    read_transactions,
)
from olympia.expire.txnfiles import remove_expired
from olympia.versions.policy import Decision, ExpirePolicy, decide, export_roots, format_duration

SAMPLE_SIZE = 20
DEFAULT_SETTLE_MS = 2000

StepHook = Callable[[str, dict[str, Any]], None]


@dataclass
class Walk:
    """What a walk found; ``handle`` is the engine's reachable set."""

    handle: Any
    cdefs: set[str]
    missing: list[str]
    nodes: int
    levels: int


class Engine(Protocol):
    """Data movement for one run. Paths are always catalog-relative, as the tree writes them."""

    name: str

    def list_files(self, prefixes: list[str]) -> Any:
        """Every file under ``prefixes`` (path, size, modified)."""

    def transactions(self, listing: Any) -> list[TxnRoots]:
        """The distributed transaction records among the listed files."""

    def walk(self, versions: range, roots: list[str], order: int, prior: Walk | None) -> Walk:
        """Everything reachable from the roots of ``versions`` and from ``roots`` (vn/ roots
        or running roots under node/), plus everything ``prior`` reached."""

    def classify(self, listing: Any, walk: Walk, keep: set[str], decision: Decision,
                 probe: list[str]) -> tuple[dict[str, FolderStats], Any, set[str]]:
        """Per-folder counts; the candidates (listed, not reachable, not in ``keep``, and
        allowed by :func:`~olympia.expire.reachability.is_candidate`); which of ``probe``
        the listing holds."""

    def sample(self, candidates: Any, size: int) -> list[str]:
        """The first ``size`` candidate paths in path order."""

    def delete(self, candidates: Any, roots: bool) -> DeleteReport:
        """Delete the candidate roots (``roots``) or every other candidate."""

    def remaining(self, candidates: Any, prefixes: list[str]) -> dict[str, tuple[int, int]]:
        """Per folder, how many candidates (and bytes) a fresh listing still shows."""

    def reached(self, candidates: Any, walk: Walk, size: int) -> list[str]:
        """The first ``size`` candidate paths (in path order) that ``walk`` reaches."""

    def release(self) -> None:
        """Drop cached data."""


@dataclass
class FolderStats:
    listed: int = 0
    listed_bytes: int = 0
    reachable: int = 0
    candidates: int = 0
    candidate_bytes: int = 0
    deleted: int = 0
    failed: int = 0
    bytes_deleted: int = 0


@dataclass
class ExpireResult:
    """What a run did (or, with ``dry_run``, would do)."""

    catalog: str
    engine: str
    dry_run: bool
    policy: dict[str, Any]
    now_ms: int = 0
    grace_cutoff_ms: int = 0
    latest_version: int = 0
    latest_version_at_end: int = 0
    old_oldest_version: int = 0
    new_oldest_version: int = 0
    versions_expired: int = 0
    protected: dict[str, str] = field(default_factory=dict)
    #: expired transaction -> how many of its Iceberg files were deleted
    transaction_files: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    folders: dict[str, FolderStats] = field(
        default_factory=lambda: {f: FolderStats() for f in FOLDERS})
    nodes_walked: int = 0
    walk_levels: int = 0
    seconds_identifying: float = 0.0
    seconds_deleting: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    sample: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def _total(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.folders.values())

    @property
    def files_listed(self) -> int:
        return self._total("listed")

    @property
    def files_reachable(self) -> int:
        return self._total("reachable")

    @property
    def files_candidates(self) -> int:
        return self._total("candidates")

    @property
    def files_deleted(self) -> int:
        return self._total("deleted")

    @property
    def files_failed(self) -> int:
        return self._total("failed")

    @property
    def bytes_deleted(self) -> int:
        return self._total("bytes_deleted")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field plus the totals."""
        data = asdict(self)
        for name in ("files_listed", "files_reachable", "files_candidates", "files_deleted",
                     "files_failed", "bytes_deleted"):
            data[name] = getattr(self, name)
        return data

    def rows(self) -> list[dict[str, Any]]:
        """One row per folder."""
        return [{"folder": name, **asdict(stats)} for name, stats in sorted(self.folders.items())]

    def to_dataframe(self, spark: Any) -> Any:
        """The per-folder rows as a Spark DataFrame."""
        return spark.createDataFrame(self.rows())

    def summary(self) -> str:
        """A few human-readable lines."""
        verb = "Dry run: would expire" if self.dry_run else "Expired"
        lines = [
            f"{verb} {self.versions_expired} versions of {self.catalog} "
            f"(oldest {self.old_oldest_version} -> {self.new_oldest_version}, latest "
            f"{self.latest_version_at_end}) with {self.engine}",
            f"  {'folder':6} {'listed':>9} {'reachable':>10} {'to delete':>10} "
            f"{'deleted':>9} {'failed':>7} {'bytes deleted':>14}",
        ]
        for name, f in sorted(self.folders.items()):
            lines.append(f"  {name:6} {f.listed:>9} {f.reachable:>10} {f.candidates:>10} "
                         f"{f.deleted:>9} {f.failed:>7} {f.bytes_deleted:>14}")
        for path, why in sorted(self.protected.items()):
            lines.append(f"  kept {path} ({why})")
        for txn_id, count in sorted(self.transaction_files.items()):
            lines.append(f"  deleted {count} Iceberg files of expired transaction {txn_id}")
        lines.extend(f"  warning: {w}" for w in self.warnings)
        lines.extend(f"  error: {e}" for e in self.errors)
        pol = self.policy
        lines.append(f"  policy: keep-last {pol['keep_last']}, older-than "
                     f"{format_duration(pol['older_than_ms'])}, grace "
                     f"{format_duration(pol['grace_ms'])}; identify "
                     f"{self.seconds_identifying:.1f}s, delete {self.seconds_deleting:.1f}s")
        if self.timings:
            lines.append("  seconds per step: " + ", ".join(
                f"{name} {seconds:.2f}" for name, seconds in self.timings.items()))
        if self.sample:
            lines.append(f"  sample: {', '.join(self.sample[:5])}")
        return "\n".join(lines)


def advance_oldest(files: CatalogFiles, version: int) -> bool:
    """Raise ``vn/oldest`` to ``version``; never lower it. The file can only be overwritten,
    so it is read before writing (a higher value stays) and again after: a run that read it
    before this write may have put a lower value over it, which is then written over."""
    raised = False
    while version > files.oldest_version():
        files.write_hint(OLDEST, version)
        raised = True
    return raised


class _Run:
    """One run's state, driven by :func:`run`."""

    def __init__(self, engine: Engine, catalog: Catalog, policy: ExpirePolicy,
                 decision: Decision, on_step: StepHook | None, started: float) -> None:
        self.engine = engine
        self.mark = started
        self.files = catalog.files
        self.decision = decision
        self.on_step = on_step
        self.protected: dict[str, str] = {}
        self.running: dict[str, str] = {}  # live transactions' records -> the roots walked
        self.read_cdefs: set[str] = set()
        self.result = ExpireResult(
            catalog.uri, engine.name, False, policy.to_dict(), decision.now_ms,
            decision.cutoff_ms, decision.latest, decision.latest, decision.old_oldest,
            decision.new_oldest, decision.versions_expired)

    def step(self, name: str, **info: Any) -> None:
        if self.on_step is not None:
            self.on_step(name, info)

    def lap(self, name: str) -> None:
        """Add the seconds since the previous lap to ``timings[name]``: the laps of a run
        add up to its identifying plus deleting time."""
        now = time.monotonic()
        timings = self.result.timings
        timings[name] = timings.get(name, 0.0) + now - self.mark
        self.mark = now

    def walk(self, versions: range, roots: Iterable[str], prior: Walk | None) -> Walk:
        """Walk ``versions`` and ``roots``, then every export their catalog definitions
        record, until no new root turns up."""
        order = self.decision.order
        walk = self.engine.walk(versions, sorted(set(roots)), order, prior)
        self._check_missing(walk.missing)
        while True:
            new_cdefs = sorted(walk.cdefs - self.read_cdefs)
            self.read_cdefs.update(new_cdefs)
            extra = []
            for cdef in self.files.read_defs(new_cdefs, pb.CatalogDef):
                for path, why in export_roots(cdef).items():
                    if path not in self.protected:
                        self.protected[path] = why
                        if not self.retained(path):
                            extra.append(path)
            if not extra:
                return walk
            walk = self.engine.walk(range(0), extra, order, walk)
            self._check_missing(walk.missing)

    def retained(self, path: str) -> bool:
        version = path_version(path)
        return version is not None and (
            self.decision.new_oldest <= version <= self.result.latest_version_at_end)

    def _check_missing(self, missing: list[str]) -> None:
        for path in sorted(set(missing)):
            version = path_version(path)
            if self.retained(path):
                oldest = self.files.oldest_version()
                if version is not None and version >= oldest:
                    raise ExpiryAbortedError(
                        f"version {version} ({path}) is missing although vn/oldest is "
                        f"{oldest}: the catalog is damaged")
                # a concurrent expiry run with a shorter policy removed it
                self.result.warnings.append(f"{path} was expired by another run meanwhile")
            elif path in self.protected:  # fail closed: what it references is unknown
                raise ExpiryAbortedError(
                    f"{path} ({self.protected[path]}) does not exist, so the files it "
                    "references cannot be told from unreferenced ones; restore it, or drop "
                    "the export or abort the transaction that names it")

    def hold_oldest(self) -> None:
        """Put ``vn/oldest`` back to the new oldest version if a concurrent run lowered it
        (it read the file before this run raised it, and wrote after)."""
        if advance_oldest(self.files, self.decision.new_oldest):
            self.result.warnings.append(
                f"vn/oldest had been lowered below {self.decision.new_oldest} by a concurrent "
                "run; it was raised again")

    def recheck(self, walk: Walk, candidates: Any) -> Walk:
        """Right before a delete: hold ``vn/oldest``, walk the versions committed since the
        walk and the running roots live transactions' records name now (statements added
        since), and stop if one of them reaches a candidate."""
        self.hold_oldest()
        known = self.result.latest_version_at_end
        later = self.files.discover_latest()
        extended = [t for t in read_transactions(self.files.storage, sorted(self.running))
                    if self.running[t.path] != t.running_root]
        if later.version <= known and not extended:
            return walk
        self.result.latest_version_at_end = later.version
        for txn in extended:
            self.protected.setdefault(txn.running_root, f"transaction {txn.id}")
            self.running[txn.path] = txn.running_root
        walk = self.walk(range(known + 1, later.version + 1),
                         [t.running_root for t in extended], walk)
        self.result.nodes_walked, self.result.walk_levels = walk.nodes, walk.levels
        self.result.protected = dict(sorted(self.protected.items()))
        reached = self.engine.reached(candidates, walk, SAMPLE_SIZE)
        if reached:
            what = [f"versions {known + 1}..{later.version}, committed"] if (
                later.version > known) else []
            what += [f"distributed transaction {t.id}, extended" for t in extended]
            raise ExpiryAbortedError(
                f"{' and '.join(what)} after the walk, reference files about to be deleted "
                f"({', '.join(reached)})")
        return walk


def run(engine: Engine, catalog: Catalog, policy: ExpirePolicy, dry_run: bool = False, *,
        now_ms: int | None = None, settle_ms: int = DEFAULT_SETTLE_MS,
        on_step: StepHook | None = None, prefix_split: int = 1,
        clock: Clock = now_millis) -> ExpireResult:
    """Expire ``catalog`` with ``engine``; see the module docstring for the order of steps.

    ``now_ms`` evaluates the policy at an earlier instant (never a later one than
    ``clock``, epoch milliseconds: the only time source a run compares file and version
    times with); ``on_step(name, info)`` is called after each step (progress, tests).
    """
    started = time.monotonic()
    policy = policy.resolved(catalog.properties)
    files = catalog.files
    state = _Run(engine, catalog, policy, decide(files, policy, effective_now(now_ms, clock)),
                 on_step, started)
    decision, result = state.decision, state.result
    result.dry_run = dry_run
    state.lap("decide")
    state.step("decided", new_oldest=decision.new_oldest, latest=decision.latest)
    if not dry_run and advance_oldest(files, decision.new_oldest):
        state.step("oldest-advanced", oldest=decision.new_oldest)
        time.sleep(settle_ms / 1000)
    state.lap("raise_oldest")
    moved = "" if dry_run or not decision.versions_expired else (
        f" (vn/oldest was already raised to {decision.new_oldest})")
    ttl = catalog.catalog_def.txn_ttl_millis
    if policy.older_than_ms is not None and policy.older_than_ms < ttl:
        result.warnings.append(
            f"older-than {format_duration(policy.older_than_ms)} is shorter than the "
            f"transaction TTL {format_duration(ttl)}: a "
            "distributed transaction saved after its beginning version expired cannot be "
            "resumed")
    prefixes = listing_prefixes(prefix_split)
    identified = False
    try:
        listing = engine.list_files(prefixes)
        state.lap("list")
        state.step("listed")
        latest = files.discover_latest()
        result.latest_version_at_end = latest.version
        # records are read after that: one that vanished meanwhile was committed, and its
        # root is then found by the re-read of the latest version after the walk
        records = engine.transactions(listing)
        live = [t for t in records if is_live(t, decision)]
        dead = [t for t in records if not is_live(t, decision)]
        state.running = {t.path: t.running_root for t in live}
        for txn in live:
            state.protected[txn.beginning_root] = f"transaction {txn.id}"
            state.protected[txn.running_root] = f"transaction {txn.id}"
        keep = {LATEST, OLDEST} | {t.path for t in live}
        # exports only accumulate, so the latest definition names nearly all of them: walk
        # their roots together with the versions instead of in a second pass
        state.read_cdefs.add(latest.node.catalog_def or "")
        state.protected.update(
            {p: why for p, why in export_roots(latest.catalog_def).items()
             if p not in state.protected})
        roots = [p for p in state.protected if not state.retained(p)]
        state.lap("transactions")
        walk = state.walk(range(decision.new_oldest, latest.version + 1), roots, None)
        later = files.discover_latest()  # anything committed while we walked
        if later.version > latest.version:
            result.latest_version_at_end = later.version
            walk = state.walk(range(latest.version + 1, later.version + 1), [], walk)
        state.lap("walk")
        state.step("walked", nodes=walk.nodes, levels=walk.levels)
        # files that existed before the listing must be in it, spelled as the tree spells
        # them; otherwise the anti-join would see every live file as unreferenced (the
        # path-mismatch failures behind iceberg#4194 and #4652)
        first = files.read_root(decision.latest)
        probe = [first.path, first.node.catalog_def or ""]
        stats, candidates, found = engine.classify(listing, walk, keep, decision, probe)
        if set(probe) - found:
            raise ExpiryAbortedError(
                f"the listing of {catalog.uri} lacks {', '.join(sorted(set(probe) - found))}"
                ", which the catalog references: listed paths and catalog paths disagree")
        result.folders.update(stats)
        state.lap("classify")
        result.sample = engine.sample(candidates, SAMPLE_SIZE)
        identified = True
    except OlympiaError as exc:
        raise ExpiryAbortedError(f"expiry stopped, nothing deleted{moved}: {exc}") from exc
    finally:
        if not identified:
            engine.release()
    result.protected = dict(sorted(state.protected.items()))
    result.nodes_walked, result.walk_levels = walk.nodes, walk.levels
    if dry_run:
        engine.release()
    state.lap("sample")
    result.seconds_identifying = state.mark - started
    state.step("identified", candidates=result.files_candidates)
    if dry_run:
        return result

    started = state.mark = time.monotonic()
    stage = f", nothing deleted{moved}"
    try:
        walk = state.recheck(walk, candidates)
        state.lap("recheck")
        stage = " while deleting (run it again to finish)"
        # before the records, the only way to them (olympia/expire/txnfiles.py); timed
        # with the roots' delete
        result.transaction_files, notes = remove_expired(catalog, dead, decision.new_oldest)
        result.warnings.extend(notes)
        report = engine.delete(candidates, roots=True)
        state.lap("delete_roots")
        state.step("roots-deleted")
        state.recheck(walk, candidates)
        state.lap("recheck")
        report.merge(engine.delete(candidates, roots=False))
        state.lap("delete_files")
        state.step("files-deleted")
        state.hold_oldest()
        remaining = engine.remaining(candidates, prefixes)
    except OlympiaError as exc:
        raise ExpiryAbortedError(f"expiry stopped{stage}: {exc}") from exc
    finally:
        engine.release()
    for folder, entry in result.folders.items():
        left, left_bytes = remaining.get(folder, (0, 0))
        entry.failed = left
        entry.deleted = entry.candidates - left
        entry.bytes_deleted = entry.candidate_bytes - left_bytes
    result.errors = report.errors
    if result.files_failed and not result.errors:
        result.errors = ["some deletes were reported done by the storage but the files are "
                         "still listed"]
    state.lap("verify")
    result.seconds_deleting = state.mark - started
    state.step("verified", deleted=result.files_deleted, failed=result.files_failed)
    return result
