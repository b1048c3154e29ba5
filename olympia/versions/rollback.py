"""Rollback by rolling forward: a new version whose tree is an older version's tree."""

from __future__ import annotations

from collections.abc import Mapping

from olympia._proto import actions_pb2 as apb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.exceptions import CommitConflict, InvalidArgumentError, VersionExpiredError


def rollback(catalog: Catalog, to_version: int | str, *,
             expect_latest: int | None = None, info: Mapping[str, str] | None = None) -> int:
    """Commit version v+1 with the pivot table of ``to_version`` ("previous": v-1).

    The new root records ``previous_root`` and ``rollback_from_root`` = root v and a
    CATALOG_ROLLBACK action; the current catalog definition (exports, settings) is kept. It
    goes through the normal commit protocol, so a concurrent commit makes it fail with
    CommitConflict rather than be silently undone; so does a latest version other than
    ``expect_latest`` (the one a preview was computed on). ``info`` annotates the new version
    (who rolled back, which job). Returns the new version.
    """
    txn = catalog.transaction()
    latest = txn.base.version
    try:
        if expect_latest is not None and latest != expect_latest:
            raise CommitConflict(f"the catalog moved from version {expect_latest} to {latest} "
                                 "since the rollback was previewed; preview it again",
                                 version=latest)
        target = rollback_target(catalog, to_version, latest)
        root = catalog.files.read_root(target)
    except BaseException:
        txn.abort()
        raise

    def target_still_kept(_: object) -> None:  # expiry may have raised vn/oldest meanwhile
        if target < catalog.files.oldest_version():
            raise VersionExpiredError(f"version {target} expired while rolling back to it")

    txn.before_commit.append(target_still_kept)
    txn.annotate(**(info or {}))
    txn.restore_tree(root, actions.make(
        A.CATALOG_ROLLBACK, None, rollback=apb.RollbackDef(from_version=latest,
                                                           to_version=target)))
    return txn.commit()


def rollback_target(catalog: Catalog, to_version: int | str, latest: int) -> int:
    """The version ``to_version`` names ("previous": ``latest`` - 1), checked to be kept and
    older than ``latest``.

    Raises:
        InvalidArgumentError: not a version number, or not older than ``latest``.
        VersionExpiredError: the version has been expired.
    """
    if to_version == "previous":
        target = latest - 1
    elif isinstance(to_version, int) or str(to_version).isdigit():
        target = int(to_version)
    else:
        raise InvalidArgumentError(f"rollback target must be a version or 'previous', "
                                   f"got {to_version!r}")
    oldest = catalog.files.oldest_version()
    if target < oldest:
        raise VersionExpiredError(f"cannot roll back to version {target}: the oldest kept "
                                  f"version is {oldest}")
    if target >= latest:
        raise InvalidArgumentError(
            f"cannot roll back to version {target}: the latest version is {latest}")
    return target
