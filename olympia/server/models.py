"""Request bodies of the Iceberg REST specification that pyiceberg's models do not cover, or
cover with fields the specification makes optional. Table requirements and updates, schemas,
partition specs, sort orders and table metadata are pyiceberg's own models."""

from __future__ import annotations

from pydantic import Field, field_validator
from pyiceberg.catalog.rest import CreateTableRequest, CreateViewRequest, RegisterTableRequest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import CommitTableRequest, TableIdentifier
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import IcebergBaseModel

from olympia.iceberg.views import AssertViewUUID, ViewUpdate


class CreateNamespaceBody(IcebergBaseModel):
    """``POST /v1/namespaces``."""

    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesBody(IcebergBaseModel):
    """``POST /v1/namespaces/{namespace}/properties``."""

    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class CreateTableBody(CreateTableRequest):
    """``POST /v1/namespaces/{namespace}/tables``: pyiceberg's request with the fields the
    specification makes optional given their defaults."""

    location: str | None = None
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)


class RegisterTableBody(RegisterTableRequest):
    """``POST /v1/namespaces/{namespace}/register`` (``overwrite`` is optional)."""

    overwrite: bool = False


class RenameTableBody(IcebergBaseModel):
    """``POST /v1/tables/rename``."""

    source: TableIdentifier
    destination: TableIdentifier


class CommitTableBody(IcebergBaseModel):
    """``POST /v1/namespaces/{namespace}/tables/{table}``: the identifier is optional (the
    path names the table)."""

    identifier: TableIdentifier | None = None
    requirements: tuple[TableRequirement, ...] = Field(default_factory=tuple)
    updates: tuple[TableUpdate, ...] = Field(default_factory=tuple)


class CommitTransactionBody(IcebergBaseModel):
    """``POST /v1/transactions/commit``: every change names its table."""

    table_changes: list[CommitTableRequest] = Field(alias="table-changes", min_length=1)


class ReportMetricsBody(IcebergBaseModel):
    """``POST .../metrics``: a scan or commit report; only its kind is checked."""

    report_type: str = Field(alias="report-type")

    @field_validator("report_type")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in ("scan-report", "commit-report"):
            raise ValueError("report-type must be scan-report or commit-report")
        return value


class CreateViewBody(CreateViewRequest):
    """``POST /v1/namespaces/{namespace}/views`` (``location`` is optional)."""

    location: str | None = None


class CommitViewBody(IcebergBaseModel):
    """``POST /v1/namespaces/{namespace}/views/{view}``: replace a view (the identifier is
    optional, the path names the view)."""

    identifier: TableIdentifier | None = None
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate] = Field(default_factory=list)
