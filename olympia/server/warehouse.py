"""The one warehouse an ``olympia serve`` process serves: how a client's ``warehouse`` names
it, and which places and properties clients may give.

Clients choose names, never places outside the server's warehouse: every place a client
names (a table, view or namespace location, a registered metadata file) is parsed once by
:func:`olympia.iceberg.locations.confine` and must lie under the warehouse in a form every
file IO reads alike (a ``TableLocationError``, answered 400, otherwise), and table
properties that steer the server's own file IO (``s3.*``, ``py-io-impl``, ...) are refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import LOCATION

from olympia import exceptions as oe
from olympia.iceberg.locations import confine, place
from olympia.server.errors import bad_request

#: Table properties a client may not set: they steer the server's own file IO.
REFUSED_PROPERTY_PREFIXES = ("s3.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "client.", "py-",
                             "write.py-location-provider.")
#: What errors call the warehouse.
NAME = "the server's warehouse"


class Warehouse:
    """The server's warehouse.

    Args:
        location: Where it is.

    Raises:
        InvalidArgumentError: a form a FileIO could read differently (a relative path, a
            query, a ``..`` step...).
    """

    def __init__(self, location: str) -> None:
        try:
            self._place = place(location, NAME)
        except oe.TableLocationError as exc:
            raise oe.InvalidArgumentError(str(exc)) from None
        self.location = location.rstrip("/")

    def selector(self, warehouse: str) -> str | None:
        """What follows the ``@`` of a client's ``warehouse`` (``None``: it has none, the
        latest catalog). The warehouse is compared as a place
        (:func:`olympia.iceberg.locations.place`), never as a string, so every spelling of
        the server's warehouse names it: ``/w``, ``file:/w`` and ``file:///w`` on local
        disk, and a trailing ``/`` or none.

        Raises:
            RestError: 400 naming the server's warehouse when ``warehouse`` names another
                place or is a refused form (a relative path, a ``..`` step, ...).
        """
        if self._names_this(warehouse):
            return None
        for at, char in enumerate(warehouse):
            if char == "@" and self._names_this(warehouse[:at]):
                return warehouse[at + 1:]
        base = warehouse.partition("@")[0]
        try:
            place(base, "its location")
            why = ""
        except oe.TableLocationError as exc:
            why = f" ({exc})"
        spelt = ("file:///<path>, file:/<path> or /<path>, " if self._place[0] == "" else "")
        raise bad_request(
            f"warehouse {warehouse!r} is not served here{why}: this server serves one "
            f"warehouse, {self.location} (spelt {spelt}with or without a trailing /), "
            "optionally followed by @<version>, @<instant>, @export:<name> or @txn:<id>")

    def _names_this(self, warehouse: str) -> bool:
        """Whether ``warehouse`` is a spelling of this warehouse."""
        try:
            return place(warehouse, "the warehouse asked for") == self._place
        except oe.TableLocationError:
            return False

    def check_place(self, location: str, what: str) -> None:
        """Refuse a place outside the warehouse or in a form a FileIO could read
        differently (:func:`olympia.iceberg.locations.confine`).

        Raises:
            TableLocationError: such a place (answered 400).
        """
        confine(location, self.location, what, NAME)

    def check_namespace_location(self, properties: Mapping[str, str], name: str) -> None:
        """A namespace's ``location`` (where its tables go by default) is a place too.

        Raises:
            TableLocationError: it lies outside the warehouse (or is a refused form).
        """
        if LOCATION in properties:
            self.check_place(properties[LOCATION], f"the location of namespace {name}")

    @staticmethod
    def check_properties(properties: Mapping[str, str], what: str) -> None:
        """Refuse table properties that steer the server's own file IO.

        Raises:
            RestError: such a property (400).
        """
        for key in properties:
            if key.startswith(REFUSED_PROPERTY_PREFIXES):
                raise bad_request(f"{what}: property {key} steers the server's own file "
                                  "access and cannot be set through the REST catalog")
