"""The catalog routes of the Iceberg REST Catalog OpenAPI specification (namespaces, tables,
views, table renames, metrics and multi-table commits), one router the application serves
three times: at ``/v1`` (the latest catalog), at ``/v1/version-<n>`` (catalog version
``n``, read-only; a write there is a 403 naming the version) and at ``/v1/txn-<id>`` (inside
distributed transaction ``<id>``; so are names under ``sys.dtxns.<id>``: see
:mod:`olympia.server.transactions`). Each route declares, by its dependency, whether it
reads (:data:`Reader`) or writes (:data:`Writer`) and which catalog it works on.

Paths are routed on the bytes the client sent: a name such as ``a/b`` arrives as one
percent-encoded segment and is decoded here, so no name can add a path step. A namespace
segment holding the separator ``%1F`` names a multi-level namespace: a create or any other
write there is refused (400), and a read answers that the object does not exist (404 of the
object's kind), since no Olympia namespace has more than one level. Clients probe such names:
Iceberg's Spark catalog reads ``ns.t.snapshots`` first as table ``snapshots`` in namespace
``ns.t`` and, on ``NoSuchTableException``, as the ``snapshots`` metadata table of ``ns.t``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import pydantic
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.routing import APIRoute
from pyiceberg.typedef import IcebergBaseModel
from starlette.concurrency import run_in_threadpool

from olympia.server import transactions
from olympia.server.access import READS, WRITES, read_bounded
from olympia.server.auth import Client
from olympia.server.errors import RestError, bad_request
from olympia.server.models import (
    CommitTableBody,
    CommitTransactionBody,
    CommitViewBody,
    CreateNamespaceBody,
    CreateTableBody,
    CreateViewBody,
    RegisterTableBody,
    RenameTableBody,
    ReportMetricsBody,
    UpdateNamespacePropertiesBody,
)
from olympia.server.paging import Page
from olympia.server.paths import (
    NAMESPACE_SEPARATOR,
    existing_namespace,
    levels_of,
    name_of,
    namespace_of,
    read_namespace_of,
)
from olympia.server.service import CatalogService
from olympia.server.transactions import SYSTEM, SystemNamespaces

M = TypeVar("M", bound=pydantic.BaseModel)
T = TypeVar("T")
PageToken = Annotated[str | None, Query(alias="pageToken")]
PageSize = Annotated[int | None, Query(alias="pageSize")]
Purge = Annotated[bool, Query(alias="purgeRequested")]

#: The default bound of a request body (the application's ``state.max_body_bytes``).
MAX_BODY_BYTES = 8 * 1024 * 1024

NS = "/namespaces/{namespace}"
TABLE = NS + "/tables/{table}"
VIEW = NS + "/views/{view}"


async def _reading(request: Request,
                   _: Annotated[Client | None, Depends(READS)]) -> CatalogService:
    """The catalog a read route reads: the latest, the version its path names, or the
    transaction its path names (by prefix, or a namespace under ``sys.dtxns.<id>``)."""
    service: CatalogService = request.app.state.service
    version = request.path_params.get("version")
    if version is None:
        return await _in_transaction(request, service)
    if not version.isdigit():
        raise bad_request(f"no catalog version {version!r}: versions are numbers")
    return await run_in_threadpool(service.at_version, int(version))


async def _writing(request: Request,
                   _: Annotated[Client | None, Depends(WRITES)]) -> CatalogService:
    """The catalog a write route changes: the latest, or the transaction its path names
    (403 on a version's path)."""
    version = request.path_params.get("version")
    if version is not None:
        raise RestError(403, "ForbiddenException",
                        f"catalog version {version} is read-only: {request.method} "
                        f"{request.url.path} is refused; write through the latest "
                        "catalog (a warehouse without @<version>)")
    return await _in_transaction(request, request.app.state.service)


async def _in_transaction(request: Request, service: CatalogService) -> CatalogService:
    """``service``, or inside the transaction the path names: by its prefix
    (``txn-<id>``), or by a namespace ``sys.dtxns.<id>.<ns>``.

    Raises:
        RestError: both at once (400).
        NoSuchTransactionError: no open transaction of that id (404).
    """
    txn_id = request.path_params.get("txn")
    segment = request.path_params.get("namespace")
    found = transactions.inside(levels_of(segment)) if segment is not None else None
    if found is not None and len(found[1]) == 1:
        if txn_id is not None:
            raise bad_request("a name under sys.dtxns is not served inside a transaction's "
                              "prefix: use one or the other")
        return await run_in_threadpool(transactions.in_transaction, service, found[0],
                                       (*transactions.SYSTEM, found[0]))
    if txn_id is None:
        return service
    return await run_in_threadpool(transactions.in_transaction, service, txn_id)


def system(service: CatalogService, levels: Sequence[str]) -> bool:
    """Whether a namespace route on ``levels`` is one of the server's own names (``sys``,
    ``sys.dtxns``, ``sys.dtxns.<id>``), served by :class:`SystemNamespaces`: only at the
    latest catalog's prefix."""
    return (transactions.is_system(levels) and len(levels) <= 3
            and not service.catalog.read_only and service.catalog.transaction_id is None)


Reader = Annotated[CatalogService, Depends(_reading)]
Writer = Annotated[CatalogService, Depends(_writing)]


async def parse_body(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model``, read within the application's bound.

    Raises:
        RestError: larger than the bound (413), not a JSON object, or not ``model`` (400).
    """
    data = await read_bounded(request, request.app.state.max_body_bytes)
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, RecursionError):
        raise bad_request("the request body is not JSON text") from None
    except json.JSONDecodeError as exc:
        raise bad_request(f"malformed JSON in the request body ({exc.msg} at line "
                          f"{exc.lineno} column {exc.colno})") from None
    if not isinstance(parsed, dict):
        raise bad_request("the request body must be a JSON object")
    try:
        return model.model_validate(parsed)
    except pydantic.ValidationError as exc:
        raise bad_request(describe(exc.errors(include_input=False, include_url=False))
                          ) from None


async def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread: catalog work never runs on the event loop."""
    return await run_in_threadpool(fn, *args)


def page(page_token: str | None, page_size: int | None) -> Page:
    if page_size is not None and page_size < 1:
        raise bad_request(f"pageSize must be a positive number, got {page_size}")
    return Page(page_token or None, page_size)


async def _listing(source: CatalogService, namespace: str,
                   list_in: Callable[[str, Page], str], page_token: str | None,
                   page_size: int | None) -> Response:
    """A page of the tables or views of a namespace (none under the server's own
    ``sys...`` names, which hold namespaces only)."""
    if system(source, levels_of(namespace)):
        return json_answer({"identifiers": [], "next-page-token": None})
    return Response(await call(list_in, read_namespace_of(namespace),
                               page(page_token, page_size)), media_type="application/json")


router = APIRouter()


# --- namespaces -----------------------------------------------------------------

@router.get("/namespaces")
async def list_namespaces(source: Reader, parent: str | None = None,
                          page_token: PageToken = None,
                          page_size: PageSize = None) -> Response:
    levels = parent.split(NAMESPACE_SEPARATOR) if parent is not None else []
    if system(source, levels) or (tuple(levels) == SYSTEM[:1] and system(source, SYSTEM)):
        return json_answer(await call(SystemNamespaces(source).list_namespaces, levels,
                                      page(page_token, page_size)))
    where = existing_namespace(parent) if parent is not None else None
    return json_answer(await call(source.list_namespaces, where,
                                  page(page_token, page_size)))


@router.post("/namespaces")
async def create_namespace(request: Request, target: Writer) -> Response:
    parsed = await parse_body(request, CreateNamespaceBody)
    if system(target, parsed.namespace):
        return json_answer(await call(SystemNamespaces(target).begin, parsed.namespace,
                                      parsed.properties))
    target = await call(transactions.target, target, [parsed.namespace])
    return json_answer(await call(target.create_namespace, parsed))


@router.get(NS)
async def load_namespace(source: Reader, namespace: str) -> Response:
    levels = levels_of(namespace)
    if system(source, levels):
        return json_answer(await call(SystemNamespaces(source).load, levels))
    return json_answer(await call(source.load_namespace,
                                  read_namespace_of(namespace)))


@router.head(NS)
async def namespace_exists(source: Reader, namespace: str) -> Response:
    levels = levels_of(namespace)
    if system(source, levels):
        found = await call(SystemNamespaces(source).exists, levels)
    else:
        found = await call(source.namespace_exists, read_namespace_of(namespace))
    return Response(status_code=204 if found else 404)


@router.delete(NS)
async def drop_namespace(target: Writer, namespace: str) -> Response:
    levels = levels_of(namespace)
    if system(target, levels):
        await call(SystemNamespaces(target).drop, levels)
    else:
        await call(target.drop_namespace, namespace_of(namespace))
    return Response(status_code=204)


@router.post(NS + "/properties")
async def update_namespace_properties(request: Request, target: Writer,
                                      namespace: str) -> Response:
    parsed = await parse_body(request, UpdateNamespacePropertiesBody)
    levels = levels_of(namespace)
    if system(target, levels):
        return json_answer(await call(SystemNamespaces(target).update, levels, parsed))
    return json_answer(await call(target.update_namespace_properties, namespace_of(namespace),
                                  parsed))


# --- tables ---------------------------------------------------------------------

@router.get(NS + "/tables")
async def list_tables(source: Reader, namespace: str, page_token: PageToken = None,
                      page_size: PageSize = None) -> Response:
    return await _listing(source, namespace, source.list_tables, page_token, page_size)


@router.post(NS + "/tables")
async def create_table(request: Request, target: Writer, namespace: str) -> Response:
    parsed = await parse_body(request, CreateTableBody)
    return model_answer(await call(target.create_table, namespace_of(namespace), parsed))


@router.get(TABLE)
async def load_table(source: Reader, namespace: str, table: str,
                     snapshots: str = "all") -> Response:
    return Response(await call(source.load_table,
                               read_namespace_of(namespace, "table", table),
                               name_of(table), snapshots), media_type="application/json")


@router.head(TABLE)
async def table_exists(source: Reader, namespace: str, table: str) -> Response:
    found = await call(source.table_exists,
                       read_namespace_of(namespace, "table", table), name_of(table))
    return Response(status_code=204 if found else 404)


@router.post(TABLE)
async def commit_table(request: Request, target: Writer, namespace: str,
                       table: str) -> Response:
    parsed = await parse_body(request, CommitTableBody)
    return Response(await call(target.commit_table, namespace_of(namespace), name_of(table),
                               parsed), media_type="application/json")


@router.delete(TABLE)
async def drop_table(target: Writer, namespace: str, table: str,
                     purge: Purge = False) -> Response:
    await call(target.drop_table, namespace_of(namespace), name_of(table), purge)
    return Response(status_code=204)


@router.post(NS + "/register")
async def register_table(request: Request, target: Writer, namespace: str) -> Response:
    parsed = await parse_body(request, RegisterTableBody)
    return model_answer(await call(target.register_table, namespace_of(namespace), parsed))


@router.post("/tables/rename")
async def rename_table(request: Request, target: Writer) -> Response:
    parsed = await parse_body(request, RenameTableBody)
    target = await call(transactions.target, target,
                        [parsed.source.namespace.root, parsed.destination.namespace.root])
    await call(target.rename_table, parsed)
    return Response(status_code=204)


@router.post(TABLE + "/metrics")
async def report_metrics(request: Request, source: Reader, namespace: str,
                         table: str) -> Response:
    await parse_body(request, ReportMetricsBody)
    await call(source.require_table,
               read_namespace_of(namespace, "table", table), name_of(table))
    return Response(status_code=204)


@router.post("/transactions/commit")
async def commit_transaction(request: Request, target: Writer) -> Response:
    parsed = await parse_body(request, CommitTransactionBody)
    target = await call(transactions.target, target,
                        [change.identifier.namespace.root for change in parsed.table_changes])
    await call(target.commit_transaction, parsed)
    return Response(status_code=204)


# --- views ----------------------------------------------------------------------

@router.get(NS + "/views")
async def list_views(source: Reader, namespace: str, page_token: PageToken = None,
                     page_size: PageSize = None) -> Response:
    return await _listing(source, namespace, source.list_views, page_token, page_size)


@router.post(NS + "/views")
async def create_view(request: Request, target: Writer, namespace: str) -> Response:
    parsed = await parse_body(request, CreateViewBody)
    return model_answer(await call(target.create_view, namespace_of(namespace), parsed))


@router.get(VIEW)
async def load_view(source: Reader, namespace: str, view: str) -> Response:
    return model_answer(await call(source.load_view,
                                   read_namespace_of(namespace, "view", view), name_of(view)))


@router.head(VIEW)
async def view_exists(source: Reader, namespace: str, view: str) -> Response:
    found = await call(source.view_exists,
                       read_namespace_of(namespace, "view", view), name_of(view))
    return Response(status_code=204 if found else 404)


@router.post(VIEW)
async def replace_view(request: Request, target: Writer, namespace: str, view: str) -> Response:
    parsed = await parse_body(request, CommitViewBody)
    return model_answer(await call(target.replace_view, namespace_of(namespace), name_of(view),
                                   parsed))


@router.delete(VIEW)
async def drop_view(target: Writer, namespace: str, view: str) -> Response:
    await call(target.drop_view, namespace_of(namespace), name_of(view))
    return Response(status_code=204)


@router.post("/views/rename")
async def rename_view(request: Request, target: Writer) -> Response:
    parsed = await parse_body(request, RenameTableBody)
    target = await call(transactions.target, target,
                        [parsed.source.namespace.root, parsed.destination.namespace.root])
    await call(target.rename_view, parsed)
    return Response(status_code=204)


#: What ``GET /v1/config`` lists, derived from :data:`router` (the specification's form:
#: ``{prefix}`` is empty, or ``version-<n>`` for a catalog version).
ENDPOINTS = tuple(f"{method} /v1/{{prefix}}{route.path}"
                  for route in router.routes if isinstance(route, APIRoute)
                  for method in sorted(route.methods))


def describe(errors: Any) -> str:
    """Validation errors in one line: where, and what is wrong (never the input)."""
    parts = []
    for error in list(errors)[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else
                     str(error.get("msg", "invalid")))
    more = f" (and {len(errors) - 3} more problems)" if len(errors) > 3 else ""
    return "invalid request: " + "; ".join(parts) + more


def json_answer(value: dict[str, Any]) -> Response:
    return Response(json.dumps(value), media_type="application/json")


def model_answer(value: IcebergBaseModel) -> Response:
    return Response(value.model_dump_json(), media_type="application/json")
