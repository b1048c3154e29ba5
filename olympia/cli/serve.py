"""``olympia serve``: the catalog as an Apache Iceberg REST catalog (docs/REST.md)."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import click

from olympia.cli.common import catalog_options, handle_errors, key_value_pairs, open_catalog
from olympia.exceptions import InvalidArgumentError


@click.command("serve")
@catalog_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8181, show_default=True,
              help="Port to listen on (0: any free port; the address is printed).")
@click.option("--warehouse", metavar="LOCATION",
              help="Where tables live; clients may place nothing outside it (default: the "
                   "catalog's warehouse property).")
@click.option("--client-property", "client_property", multiple=True, metavar="KEY=VALUE",
              help="A property clients get (config defaults and every table's config), such "
                   "as s3.endpoint for their own file access; repeatable.")
@click.option("--max-body-bytes", type=click.IntRange(1), default=8 * 1024 * 1024,
              show_default=True, help="Largest request body accepted.")
@click.option("--max-metadata-bytes", type=click.IntRange(1),
              help="Largest Iceberg metadata file read (a table to register or load); a "
                   "larger one is refused.  [default: 33554432 (32 MiB)]")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="PATH",
              help="Clients and their bearer tokens, one a line: '<client-id> "
                   "<read-only|read-write> <secret>'; every request then needs one.")
@click.option("--max-connections", type=click.IntRange(1), metavar="N",
              help="Open connections served; a connection beyond them is answered 503, and "
                   "beyond N + N/8 (at least 8) closed at once (default: 7/8 of the "
                   "file-descriptor limit less 64: 840 for 'ulimit -n' 1024).")
@click.option("--timeout-idle", type=click.IntRange(1), default=5, show_default=True,
              metavar="SECONDS",
              help="Close a connection silent this long: before its first request, and "
                   "between requests.")
@click.option("--timeout-request", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, metavar="SECONDS",
              help="Close a connection whose request (headers and body) has not arrived this "
                   "long after its first byte (408 when its headers never ended).")
@click.option("--failed-secret-burst", type=click.IntRange(1), default=10,
              show_default=True, metavar="N",
              help="Wrong secrets an address (or a client id, at the token endpoint and "
                   "the UI's sign-in form) may send at once before it is answered 429.")
@click.option("--failed-secret-interval", type=click.FloatRange(min=0, min_open=True),
              default=1.0, show_default=True, metavar="SECONDS",
              help="Seconds after which one more wrong secret is allowed.")
@click.option("--coalesce-commits/--no-coalesce-commits", default=True, show_default=True,
              help="Let commits that arrive at the same time and change different objects "
                   "share one catalog version (a table's create, register, rename or new "
                   "location still lands alone; each client gets its own answer). Without "
                   "it every commit is a catalog version of its own.")
@click.option("--insecure", is_flag=True,
              help="Allow a non-loopback address without --token-file (anyone who reaches "
                   "the server can change the catalog).")
@handle_errors
def serve(catalog_uri: str, storage_option: tuple[str, ...], host: str, port: int,
          warehouse: str | None, client_property: tuple[str, ...], max_body_bytes: int,
          max_metadata_bytes: int | None, token_file: str | None, max_connections: int | None,
          timeout_idle: int, timeout_request: float, failed_secret_burst: int,
          failed_secret_interval: float, coalesce_commits: bool, insecure: bool) -> None:
    """Serve the catalog to Iceberg clients (Spark, DuckDB, pyiceberg, ...) over the Iceberg
    REST catalog protocol until interrupted."""
    try:
        import uvicorn

        from olympia.iceberg.catalog import OlympiaCatalog
        from olympia.server import CatalogService, create_app
        from olympia.server.auth import Throttle, Tokens
        from olympia.server.connections import Limits, guarded_protocol
    except ModuleNotFoundError as exc:
        raise click.ClickException(f"olympia serve needs {exc.name}: pip install "
                                   "'olympia-catalog[serve]'") from None
    if not insecure and token_file is None and not _loopback(host):
        raise click.UsageError(f"--host {host} is not a loopback address: give clients tokens "
                               "with --token-file, or pass --insecure to serve anyone")
    limits = Limits(max_connections or Limits.default_max_connections(), timeout_idle,
                    timeout_request)
    if limits.fds_needed() > Limits.fd_limit():
        raise click.UsageError(
            f"--max-connections {limits.max_connections} needs {limits.fds_needed()} file "
            f"descriptors, and this process may open {Limits.fd_limit()}: give fewer, or "
            "raise the limit (ulimit -n)")
    tokens = Tokens.load(token_file) if token_file is not None else None
    clients = key_value_pairs("--client-property", client_property)
    store = open_catalog(catalog_uri, storage_option)
    # vn/latest is written after each root, best effort: by one worker, off the answer's path
    hints = ThreadPoolExecutor(1, thread_name_prefix="olympia-hint")
    store.commit_options = replace(store.commit_options, write_hint=hint_writer(hints),
                                   coalesce=coalesce_commits)
    catalog = OlympiaCatalog.over(store, max_metadata_bytes=max_metadata_bytes)
    if warehouse:
        catalog.properties["warehouse"] = warehouse
    try:
        service = CatalogService(catalog, clients)
    except InvalidArgumentError as exc:
        raise click.UsageError(str(exc)) from None
    app = create_app(service, max_body_bytes=max_body_bytes, tokens=tokens,
                     throttle=Throttle(failed_secret_burst, failed_secret_interval))
    listener = _listen(host, port)
    bound_host, bound_port = listener.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    click.echo(f"Serving catalog {store.uri} (version {store.version}) at "
               f"http://{shown}:{bound_port}")
    server = uvicorn.Server(uvicorn.Config(
        app, log_level="info", server_header=False, http=guarded_protocol(limits),
        timeout_keep_alive=timeout_idle))
    try:
        server.run(sockets=[listener])
    finally:
        listener.close()
        hints.shutdown()  # the hints of the last commits are written
        store.close()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket: connections queue from here on, before the server runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listener.listen(128)
    return listener


COMMANDS = [serve]


def hint_writer(hints: ThreadPoolExecutor) -> Callable[[Callable[[], None]], None]:
    """A commit's ``write_hint``: runs each best-effort ``vn/latest`` write on ``hints`` and
    logs one that failed (the write itself logs a storage failure as a warning; what
    reaches this log is a bug, never a lost commit)."""
    def submit(write: Callable[[], None]) -> None:
        hints.submit(write).add_done_callback(_log_failure)
    return submit


def _log_failure(done: Future[None]) -> None:
    if (exc := done.exception()) is not None:
        logging.getLogger(__name__).error("writing the vn/latest hint failed", exc_info=exc)
