"""Iceberg views kept as Olympia views: what :class:`~olympia.iceberg.OlympiaCatalog`'s view
methods and ``olympia serve``'s view routes both read and write.

An Olympia view is a SQL definition: text, dialect, columns, default namespace, properties
and comment. An Iceberg view has more: a uuid, a location, and versions, each with its own
schema and SQL representations. So a view created or replaced as an Iceberg view keeps its
Iceberg view metadata in a file under the view's location (a new file for every change, never
rewritten), and the Olympia view mirrors the current version and names that file in its
property ``iceberg.metadata-location``. Olympia tools see the view's SQL; Iceberg clients get
back exactly the metadata their changes made, in-process or through the server.

A view defined with Olympia's own tools has no such file, or was redefined after its file
was written (its SQL, dialect, default namespace, properties or comment no longer match the
file's current version). It is listed, and can be dropped or renamed, but loading or replacing
it as an Iceberg view is refused: no Iceberg view metadata describes it exactly.

An Olympia view holds one SQL text and a one-level default namespace: a view version with
other than one SQL representation, or a deeper default namespace, is refused
(``InvalidArgumentError``).

Over 400 lines because it applies the Iceberg view specification's updates itself (pyiceberg
has models of view metadata but no code that applies view updates); each is a few lines.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    ViewAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AssignUUIDUpdate,
    RemovePropertiesUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from olympia import exceptions as oe
from olympia.catalog.objects import View
from olympia.iceberg.fileio import create_file, read_file
from olympia.iceberg.locations import confine
from olympia.iceberg.metadata import write_error
from olympia.iceberg.session import CatalogSession
from olympia.iceberg.typemap import columns_from_schema

#: The Olympia view property naming the view's current Iceberg view metadata file.
METADATA_PROPERTY = "iceberg.metadata-location"
#: A schema or version id meaning "the one added last in this change".
LAST_ADDED = -1


class AssertViewUUID(IcebergBaseModel):
    """The one view requirement: the view still has this uuid."""

    type: Literal["assert-view-uuid"]
    uuid: str


class AddViewVersionUpdate(IcebergBaseModel):
    """Add a view version (``schema-id`` -1: the schema added last)."""

    action: Literal["add-view-version"]
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersionUpdate(IcebergBaseModel):
    """Make a version current (``view-version-id`` -1: the version added last)."""

    action: Literal["set-current-view-version"]
    view_version_id: int = Field(alias="view-version-id")


#: A change to a view, as the Iceberg REST specification's ``ViewUpdate``.
ViewUpdate = Annotated[
    AssignUUIDUpdate | UpgradeFormatVersionUpdate | AddSchemaUpdate | SetLocationUpdate
    | SetPropertiesUpdate | RemovePropertiesUpdate | AddViewVersionUpdate
    | SetCurrentViewVersionUpdate,
    Field(discriminator="action"),
]


class IcebergViews:
    """The Iceberg view operations over one catalog.

    Args:
        catalog: The catalog (latest, a pinned version for reads, or a transaction).
        within: Where every view's location must lie (``None``: anywhere); a location
            outside it, or in a form a FileIO could read differently, is refused with
            ``TableLocationError``.
        within_name: What ``within`` is, for that error.
    """

    def __init__(self, catalog: CatalogSession, within: str | None = None,
                 within_name: str = "the warehouse") -> None:
        self.catalog = catalog
        self.within = within
        self.within_name = within_name

    def load(self, namespace: str, name: str) -> tuple[ViewMetadata, str]:
        """The view's Iceberg metadata and its file.

        Raises:
            NoSuchViewError: no such view (Olympia's).
            NotImplementedError: the view has no Iceberg view metadata that describes it.
            CorruptFileError: its metadata file is missing or unreadable.
            StorageError: the storage failed.
        """
        return self._metadata_of(self.catalog._reader().load_view(namespace, name))

    def create(self, namespace: str, name: str, schema: Schema, version: ViewVersion,
               location: str | None = None,
               properties: Mapping[str, str] | None = None) -> tuple[ViewMetadata, str]:
        """Create a view: its first metadata file and the Olympia view, in one version.

        Args:
            namespace: The namespace.
            name: The view's name.
            schema: Its schema, with the field ids it keeps.
            version: Its first version (schema id ``-1`` or the schema's).
            location: Where its metadata files go (``None``: derived as a table's).
            properties: Its properties.

        Returns:
            The view's metadata and its file.

        Raises:
            NoSuchNamespaceError: the namespace does not exist.
            ViewAlreadyExistsError: a table or view of that name exists.
            InvalidArgumentError: a reserved property, or a version the view cannot hold.
            TableLocationError: a location outside :attr:`within` (or in a refused form).
        """
        what = f"view {namespace}.{name}"
        props = dict(properties or {})
        location = (location or self.catalog._get_default_warehouse_location(
            namespace, name)).rstrip("/")
        self._check_place(location, what)
        _check_properties(props, what)
        if version.schema_id not in (schema.schema_id, LAST_ADDED):
            raise oe.InvalidArgumentError(
                f"{what}: its version names schema {version.schema_id}, but the schema "
                f"given has id {schema.schema_id}")
        _check_version(version, what)
        version = version.model_copy(update={"schema_id": schema.schema_id})
        metadata = ViewMetadata(  # type: ignore[call-arg]  # pydantic takes field names
            view_uuid=str(uuid.uuid4()), format_version=1, location=location,
            schemas=[schema], current_version_id=version.version_id,
            versions=[version], properties=props, version_log=[_history(version)])

        def stage(bound: CatalogSession) -> str:
            txn = bound._staging()
            if not txn.namespace_exists(namespace):
                raise NoSuchNamespaceError(f"Namespace does not exist: {namespace}")
            if txn.table_exists(namespace, name) or txn.view_exists(namespace, name):
                raise ViewAlreadyExistsError(f"{what} already exists (a table or view has "
                                             "that name)")
            path = _write(bound, metadata)
            txn.create_view((namespace, name), **_mirror(metadata, path))
            return path

        try:
            return metadata, self.catalog._change(stage, "create_view")
        except CommitFailedException:  # a concurrent create of the same name landed first
            if self.catalog._reader().view_exists(namespace, name):
                raise ViewAlreadyExistsError(f"{what} already exists") from None
            raise

    def replace(self, namespace: str, name: str, requirements: Sequence[AssertViewUUID],
                updates: Sequence[ViewUpdate]) -> tuple[ViewMetadata, str]:
        """Apply a client's view updates: a new metadata file and the Olympia view replaced,
        in one version (none when the updates change nothing).

        Args:
            namespace: The namespace.
            name: The view's name.
            requirements: What must hold first (the view's uuid).
            updates: The changes, applied in order as the Iceberg view spec defines them.

        Returns:
            The view's metadata and its file.

        Raises:
            NoSuchViewError: no such view (Olympia's).
            CommitFailedException: the view's uuid is not the one required, or a concurrent
                commit changed the view.
            NotImplementedError: the view has no Iceberg view metadata that describes it.
            InvalidArgumentError: an update the view cannot take.
            TableLocationError: a location outside :attr:`within` (or in a refused form).
        """
        what = f"view {namespace}.{name}"

        def stage(bound: CatalogSession) -> tuple[ViewMetadata, str]:
            txn = bound._staging()
            view = txn.load_view(namespace, name)
            base, location = self._metadata_of(view)
            for requirement in requirements:
                if requirement.uuid != base.view_uuid:
                    raise CommitFailedException(
                        f"Requirement failed: {what} has uuid {base.view_uuid}, not "
                        f"{requirement.uuid} (it was dropped and created again)")
            metadata = self._apply(base, updates, what)
            if metadata == base:
                return base, location
            path = _write(bound, metadata)
            txn.replace_view((namespace, name), **_mirror(metadata, path),
                             protected=view.protected)
            return metadata, path

        return self.catalog._change(stage, "replace_view")

    def rename(self, source: tuple[str, str], destination: tuple[str, str]) -> None:
        """Rename a view, within its namespace or into another one, in one version.

        Raises:
            NoSuchViewError: the source does not exist.
            NoSuchNamespaceError: the destination namespace does not exist.
            AlreadyExistsError: a table or view has the destination name.
            ProtectedObjectError: a protected view moved to another namespace (that drops it).
        """
        def stage(bound: CatalogSession) -> None:
            txn = bound._staging()
            view = txn.load_view(*source)
            if destination[0] == source[0]:
                txn.rename_view(source, destination[1])
                return
            txn.drop_view(source)
            txn.create_view(destination, sql=view.sql, dialect=view.dialect,
                            columns=view.columns, referenced_objects=view.referenced_objects,
                            default_namespace=view.default_namespace,
                            properties=view.properties, comment=view.comment,
                            protected=view.protected)

        self.catalog._change(stage, "rename_view")

    # --- helpers -----------------------------------------------------------------------

    def _metadata_of(self, view: View) -> tuple[ViewMetadata, str]:
        what = f"view {view.namespace}.{view.name}"
        location = view.properties.get(METADATA_PROPERTY)
        if not location:
            raise NotImplementedError(
                f"{what} was defined with Olympia's own tools and has no Iceberg view "
                "metadata: read its SQL with olympia, or drop it and create it through the "
                "REST catalog or OlympiaCatalog.create_view")
        metadata = _read(self.catalog, location, what)
        mirror = _mirror(metadata, location)
        found = {"sql": view.sql, "dialect": view.dialect, "comment": view.comment,
                 "default_namespace": view.default_namespace,
                 "properties": dict(view.properties)}
        if any(mirror[key] != value for key, value in found.items()):
            raise NotImplementedError(
                f"{what} was redefined with Olympia's own tools after its Iceberg view "
                f"metadata ({location}) was written: read its SQL with olympia, or drop it "
                "and create it through the REST catalog or OlympiaCatalog.create_view")
        return metadata, location

    def _apply(self, base: ViewMetadata, updates: Sequence[ViewUpdate],
               what: str) -> ViewMetadata:
        """``base`` with ``updates`` applied in order, as the Iceberg view spec defines them
        (an added schema or version equal to one the view has reuses its id)."""
        schemas, versions = list(base.schemas), list(base.versions)
        log, properties = list(base.version_log), dict(base.properties)
        location, current = base.location, base.current_version_id
        added_schema: int | None = None
        added_version: int | None = None
        for update in updates:
            if isinstance(update, AssignUUIDUpdate):
                if str(update.uuid) != base.view_uuid:
                    raise oe.InvalidArgumentError(
                        f"{what} has uuid {base.view_uuid}; a view's uuid never changes")
            elif isinstance(update, UpgradeFormatVersionUpdate):
                if update.format_version != 1:
                    raise oe.InvalidArgumentError(
                        f"{what}: view format version {update.format_version} is not "
                        "supported (only 1)")
            elif isinstance(update, AddSchemaUpdate):
                added_schema = next((s.schema_id for s in schemas if s == update.schema_),
                                    None)
                if added_schema is None:
                    added_schema = max(s.schema_id for s in schemas) + 1
                    schemas.append(update.schema_.model_copy(
                        update={"schema_id": added_schema}))
            elif isinstance(update, SetLocationUpdate):
                location = update.location.rstrip("/")
                self._check_place(location, what)
            elif isinstance(update, SetPropertiesUpdate):
                _check_properties(update.updates, what)
                properties.update(update.updates)
            elif isinstance(update, RemovePropertiesUpdate):
                for key in update.removals:
                    properties.pop(key, None)
            elif isinstance(update, AddViewVersionUpdate):
                version = update.view_version
                schema_id = added_schema if version.schema_id == LAST_ADDED else (
                    version.schema_id)
                if schema_id is None or all(s.schema_id != schema_id for s in schemas):
                    raise oe.InvalidArgumentError(
                        f"{what}: the version added names schema {version.schema_id}, "
                        "which the view does not have")
                _check_version(version, what)
                version = version.model_copy(update={"schema_id": schema_id})
                added_version = next((v.version_id for v in versions if _same(v, version)),
                                     None)
                if added_version is None:
                    added_version = max(v.version_id for v in versions) + 1
                    versions.append(version.model_copy(update={"version_id": added_version}))
            else:
                current = _set_current(update, versions, added_version, current, log, what)
        return base.model_copy(update={
            "schemas": schemas, "versions": versions, "version_log": log,
            "properties": properties, "location": location, "current_version_id": current})

    def _check_place(self, location: str, what: str) -> None:
        if self.within is not None:
            confine(location, self.within, f"the location of {what}", self.within_name)


def _set_current(update: SetCurrentViewVersionUpdate, versions: list[ViewVersion],
                 added: int | None, current: int, log: list[ViewHistoryEntry],
                 what: str) -> int:
    """The current version id after ``update`` (a change is logged in ``log``)."""
    wanted = added if update.view_version_id == LAST_ADDED else update.view_version_id
    chosen = next((v for v in versions if v.version_id == wanted), None)
    if chosen is None:
        raise oe.InvalidArgumentError(
            f"{what}: no version {update.view_version_id} to make current")
    if chosen.version_id != current:
        log.append(_history(chosen))
    return chosen.version_id


def _history(version: ViewVersion) -> ViewHistoryEntry:
    """The version log entry of ``version`` becoming current."""
    return ViewHistoryEntry(timestamp_ms=version.timestamp_ms,  # type: ignore[call-arg]
                            version_id=version.version_id)


def _same(one: ViewVersion, other: ViewVersion) -> bool:
    """Whether two versions define the same view (ids and timestamps aside)."""
    ignored = {"version_id": 0, "timestamp_ms": 0}
    return one.model_copy(update=ignored) == other.model_copy(update=ignored)


def _check_version(version: ViewVersion, what: str) -> None:
    if len(version.representations) != 1:
        raise oe.InvalidArgumentError(
            f"{what}: a view version with {len(version.representations)} SQL "
            "representations cannot be kept (an Olympia view holds one SQL text in one "
            "dialect)")
    if len(version.default_namespace) > 1:
        raise oe.InvalidArgumentError(
            f"{what}: default namespace {'.'.join(version.default_namespace)!r} has several "
            "levels; Olympia namespaces have one level")


def _check_properties(properties: Mapping[str, str], what: str) -> None:
    if METADATA_PROPERTY in properties:
        raise oe.InvalidArgumentError(
            f"{what}: property {METADATA_PROPERTY} is the catalog's own (it names the "
            "view's metadata file)")


def _mirror(metadata: ViewMetadata, location: str) -> dict[str, Any]:
    """The Olympia view definition of ``metadata``'s current version, stored at
    ``location`` (keyword arguments of ``create_view`` and ``replace_view``)."""
    version = next(v for v in metadata.versions if v.version_id == metadata.current_version_id)
    schema = next(s for s in metadata.schemas if s.schema_id == version.schema_id)
    sql = version.representations[0].root
    return {"sql": sql.sql, "dialect": sql.dialect, "columns": columns_from_schema(schema),
            "default_namespace": "".join(version.default_namespace),
            "properties": {**metadata.properties, METADATA_PROPERTY: location},
            "comment": metadata.properties.get("comment", "")}


def _write(bound: CatalogSession, metadata: ViewMetadata) -> str:
    """Write ``metadata`` to a new file under its location, deleted again if the
    transaction of ``bound`` is aborted.

    Returns:
        The file's location.
    """
    path = (f"{metadata.location}/metadata/{len(metadata.version_log):05d}-{uuid.uuid4()}"
            ".metadata.json")
    io = bound._load_file_io(location=path)
    try:
        create_file(io, path, metadata.model_dump_json().encode())
    except OSError as exc:
        raise write_error(io, path, "a view", exc) from exc
    bound._written.append((io, path))
    return path


def _read(catalog: CatalogSession, location: str, what: str) -> ViewMetadata:
    """The view metadata in the file at ``location`` (read afresh every time).

    Raises:
        CorruptFileError: the file is missing or is no Iceberg view metadata.
        StorageError: the storage failed otherwise.
    """
    try:
        data = read_file(catalog._load_file_io(location=location), location)
    except FileNotFoundError:
        raise oe.CorruptFileError(location, f"the Iceberg metadata of {what} does not "
                                            "exist") from None
    except OSError as exc:
        raise oe.StorageError(f"{what}: cannot read its Iceberg metadata ({exc})",
                              location) from exc
    try:
        return ViewMetadata.model_validate_json(data)
    except ValueError:
        raise oe.CorruptFileError(location, f"the Iceberg metadata of {what} is not Iceberg "
                                            "view metadata") from None

