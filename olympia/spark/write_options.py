"""The options of a write: how an overwrite chooses what it replaces, nullability checks and
file sizes. :mod:`olympia.spark.options` refuses any option that is neither one of these, a
read option, nor a catalog property."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from olympia.exceptions import InvalidArgumentError

# Spark's own option and session configuration for dynamic partition overwrite
OVERWRITE_MODE = "partitionoverwritemode"
OVERWRITE_MODE_CONF = "spark.sql.sources.partitionOverwriteMode"
REPLACE_WHERE = "replacewhere"
CHECK_NULLABILITY = "check-nullability"
TARGET_FILE_SIZE = "target-file-size-bytes"
# set by olympia.spark.write: every task's rows are sorted by this sort order of the table
SORT_ORDER_ID = "sort-order-id"
# lower-cased names, as options are keyed case-insensitively
WRITE_OPTION_NAMES = frozenset({OVERWRITE_MODE, REPLACE_WHERE, CHECK_NULLABILITY,
                                TARGET_FILE_SIZE, SORT_ORDER_ID})


@dataclass(frozen=True)
class WriteOptions:
    """Parsed options of one write.

    Attributes:
        overwrite_mode: ``static`` (an overwrite replaces the table) or ``dynamic`` (it
            replaces the partitions present in the written rows); None when not given.
        replace_where: a predicate: an overwrite replaces the rows it matches, and every
            written row must match it.
        check_nullability: False lets a nullable Spark column fill a required field.
        target_file_size: bytes a data file is aimed at (None: the table's
            ``write.target-file-size-bytes``).
        sort_order_id: the table's sort order every task's rows are sorted by (checked on
            every row, recorded on the data files); None when the rows are not known to be
            sorted.
    """

    overwrite_mode: str | None = None
    replace_where: str | None = None
    check_nullability: bool = True
    target_file_size: int | None = None
    sort_order_id: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        """Parse the write options of ``options`` (keys lower-cased).

        Raises:
            InvalidArgumentError: a value that is not one the option takes, naming it.
        """
        mode = (options.get(OVERWRITE_MODE) or "").strip().lower() or None
        if mode not in (None, "static", "dynamic"):
            raise InvalidArgumentError(
                f"option partitionOverwriteMode must be static or dynamic, not {mode!r}")
        check = (options.get(CHECK_NULLABILITY) or "true").strip().lower()
        if check not in ("true", "false"):
            raise InvalidArgumentError(
                f"option {CHECK_NULLABILITY} must be true or false, not {check!r}")
        replace_where = (options.get(REPLACE_WHERE) or "").strip() or None
        return cls(mode, replace_where, check == "true",
                   _whole(options, TARGET_FILE_SIZE, 1, "a positive whole number of bytes"),
                   _whole(options, SORT_ORDER_ID, 0, "a sort order id of the table"))


def _whole(options: Mapping[str, str], key: str, minimum: int, what: str) -> int | None:
    raw = (options.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidArgumentError(f"option {key} must be {what}, not {raw!r}")
    return value
