"""`olympia serve` under unauthenticated abuse (issue 44): an authorized client's latency,
quiet and while 1,000 idle connections and 4 abusive token clients run against the server.

One authorized client (a read-only client's access token from ``/v1/oauth/tokens``, as
pyiceberg's ``credential=`` gets it; one kept-alive connection) loads a table
(``GET /v1/namespaces/bench/tables/events``) again and again: first with nothing else
running (quiet), then while a separate attacker process (this module, ``--attack``) keeps
1,000 connections open that send nothing (opening a new one for each the server closes) and
runs 4 clients that post to ``/v1/oauth/tokens`` in a loop, taking turns between an 8 MB
form (the finding's attack) and a form with a wrong secret. Goal: the attack's p99 within
2x the quiet p99, and no request of the authorized client refused.

Everything is on the loopback interface: the authorized client on 127.0.0.1, the 4 abusive
clients on 127.0.0.2-5 and the idle connections on 127.0.0.6 (other hosts, as the server
sees them). The attacker stops by itself after its time is up (and is also stopped by its
PID). The server runs with its default limits. This process and the attacker
need more than 1,000 file descriptors: when the soft ``RLIMIT_NOFILE`` is lower, it is raised
within the hard limit (the result records both).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from benchmarks.common import ROOT, workdir

IDLE = 1000
ABUSERS = 4
GOAL = 2.0
TOKEN = "bench-reader-secret-5e1d"
BIG_FORM = 8 * 1024 * 1024
NEEDED_FDS = 4096


def _raise_fd_limit() -> dict[str, int]:
    """Raise the soft file-descriptor limit to :data:`NEEDED_FDS` (within the hard limit);
    the server and the attacker inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < NEEDED_FDS:
        wanted = NEEDED_FDS if hard == resource.RLIM_INFINITY else min(NEEDED_FDS, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return {"soft_before": soft, "hard": hard,
            "soft_used": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}


@contextlib.contextmanager
def _server(root: Path) -> Iterator[tuple[str, int]]:
    """``olympia serve`` with a token file over a catalog holding one small table: its URL
    and PID. Its log goes to a file, so that no thread of this process reads it while the
    client is timed."""
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    from olympia.catalog.catalog import Catalog as OlympiaStore

    OlympiaStore.create(str(root / "catalog")).close()
    tokens = root / "tokens"
    tokens.write_text(f"bench read-only {TOKEN}\nwriter read-write {TOKEN}-w\n")
    log_path = root / "server.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "olympia"), "serve", "-c", str(root / "catalog"),
             "--warehouse", f"file://{root}/warehouse", "--port", "0", "--token-file",
             str(tokens)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        url = ""
        deadline = time.monotonic() + 120
        while not url and time.monotonic() < deadline and server.poll() is None:
            found = re.search(r" at (http://127\.0\.0\.1:\d+)$", log_path.read_text(), re.M)
            url = found.group(1) if found else ""
            time.sleep(0.1)
        if not url:
            raise RuntimeError("olympia serve did not start: " + log_path.read_text())
        writer = RestCatalog("bench", uri=url, token=f"{TOKEN}-w")
        writer.create_namespace("bench")
        table = writer.create_table(("bench", "events"), pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        yield url, server.pid
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


class _Client:
    """The authorized client: one kept-alive connection, reopened if the server closes it."""

    def __init__(self, url: str) -> None:
        self.address = urlsplit(url)
        self.conn = self._connect()
        self.statuses: Counter[int] = Counter()
        self.reconnects = 0
        form = f"grant_type=client_credentials&client_id=bench&client_secret={TOKEN}"
        self.conn.request("POST", "/v1/oauth/tokens", form,
                          {"Content-Type": "application/x-www-form-urlencoded"})
        self.token = json.loads(self.conn.getresponse().read())["access_token"]

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.address.hostname or "", self.address.port,
                                          timeout=60)

    def load(self) -> float:
        started = time.perf_counter()
        for attempt in range(2):
            try:
                self.conn.request("GET", "/v1/namespaces/bench/tables/events",
                                  headers={"Authorization": f"Bearer {self.token}"})
                answer = self.conn.getresponse()
                answer.read()
                break
            except (http.client.HTTPException, OSError):
                if attempt:
                    raise
                self.conn.close()
                self.conn = self._connect()
                self.reconnects += 1
        self.statuses[answer.status] += 1
        return time.perf_counter() - started


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(len(ordered) * 0.99)] * 1000


def _attacked(url: str, client: _Client, count: int, seconds: float,
              server: psutil.Process) -> tuple[list[float], dict[str, Any]]:
    """The client's latencies while the attacker runs, and what the attacker saw."""
    attacker = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_auth_load", "--attack", url,
         "--seconds", str(seconds)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert attacker.stdout is not None
        ready = json.loads(attacker.stdout.readline() or "{}")  # once IDLE are open
        cpu, started = server.cpu_times(), time.perf_counter()
        samples = [client.load() for _ in range(count)]
        used, elapsed = server.cpu_times(), time.perf_counter() - started
        attacker.terminate()
        report = json.loads(attacker.stdout.readline() or "{}")
    finally:
        attacker.kill()
        attacker.wait()
    report.update(ready_idle_open=ready.get("idle_open", 0), seconds=round(elapsed, 3),
                  server_cpu_s=round(used.user + used.system - cpu.user - cpu.system, 3))
    return samples, report


def _measure(url: str, pid: int, rounds: int, count: int, seconds: float) -> dict[str, Any]:
    """Paired rounds: the client's series quiet, then attacked (the machine's other load
    shifts between rounds; each round's ratio compares neighbours)."""
    server = psutil.Process(pid)
    client = _Client(url)
    for _ in range(20):  # warm: imports, the table's cached answer, the connection
        client.load()
    quiet: list[float] = []
    attacked: list[float] = []
    ratios, reports = [], []
    for _ in range(rounds):
        cpu = server.cpu_times()
        calm = [client.load() for _ in range(count)]
        used = server.cpu_times()
        per_request = (used.user + used.system - cpu.user - cpu.system) / count
        busy, report = _attacked(url, client, count, seconds, server)
        report["server_cpu_ms_per_authorized_request"] = round(per_request * 1000, 3)
        # the server's CPU beyond the authorized requests', per second of the attack
        report["server_cpu_share_on_attackers"] = round(
            (report["server_cpu_s"] - per_request * count) / report["seconds"], 3)
        quiet += calm
        attacked += busy
        ratios.append(round(_p99(busy) / _p99(calm), 2))
        reports.append(report)
    return {"quiet": _series(quiet), "attacked": _series(attacked), "round_ratios": ratios,
            "median_round_ratio": statistics.median(ratios),
            "p99_attacked_vs_quiet": round(_p99(attacked) / _p99(quiet), 2),
            "attacker_rounds": reports, "authorized_statuses": dict(client.statuses),
            "authorized_reconnects": client.reconnects}


def _series(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    return {"requests": len(ordered), "p50_ms": round(ordered[len(ordered) // 2] * 1000, 2),
            "p99_ms": round(_p99(ordered), 2), "max_ms": round(ordered[-1] * 1000, 2)}


def run(quick: bool) -> dict[str, Any]:
    rounds, count, seconds = (2, 200, 60) if quick else (5, 1000, 120)
    limits = _raise_fd_limit()
    load = os.getloadavg()
    with workdir() as tmp, _server(tmp) as (url, pid):
        result = _measure(url, pid, rounds, count, seconds)
    result.update(fd_limit=limits, load_average=[round(x, 2) for x in (*load,
                                                                        *os.getloadavg())],
                  goal=f"p99 attacked <= {GOAL}x quiet; every authorized request answered "
                       "200")
    result["met"] = (result["p99_attacked_vs_quiet"] <= GOAL
                     and set(result["authorized_statuses"]) == {200})
    return result


# --- the attacker process ------------------------------------------------------------


async def _idle(host: str, port: int, stats: Counter[str], stop: float) -> None:
    """Hold one connection that sends nothing; open another when the server closes it."""
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection(host, port,
                                                           local_addr=("127.0.0.6", 0))
        except OSError:
            stats["idle_connect_failed"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["idle_open"] += 1
        try:
            await asyncio.wait_for(reader.read(), timeout=max(0.1, stop - time.monotonic()))
            stats["idle_closed_by_server"] += 1
        except (TimeoutError, OSError):
            pass
        finally:
            stats["idle_open"] -= 1
            writer.close()


async def _abuse(host: str, port: int, source: str, stats: Counter[str], stop: float) -> None:
    """Post to the token endpoint from ``source`` in a loop: an 8 MB form, then a wrong
    secret."""
    chunk = b"a" * 65536
    big = True
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            if big:
                writer.write(b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/x-www-form-urlencoded\r\nContent-Length: "
                             + str(BIG_FORM).encode() + b"\r\n\r\nclient_secret=")
                for _ in range(BIG_FORM // len(chunk)):
                    writer.write(chunk)
                    await writer.drain()
            else:
                form = b"grant_type=client_credentials&client_id=bench&client_secret=wrong"
                writer.write(b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/x-www-form-urlencoded\r\nContent-Length: "
                             + str(len(form)).encode() + b"\r\n\r\n" + form)
                await writer.drain()
            status = (await reader.readline()).split(b" ")[1:2]
            stats[f"token_{'8mb' if big else 'wrong'}_{(status or [b'none'])[0].decode()}"] += 1
            writer.close()
        except OSError:
            stats[f"token_{'8mb' if big else 'wrong'}_cut_off"] += 1
        big = not big


async def _attack(url: str, seconds: float) -> None:
    address = urlsplit(url)
    host, port = address.hostname or "", address.port or 0
    stats: Counter[str] = Counter()
    stop = time.monotonic() + seconds
    idle = [asyncio.create_task(_idle(host, port, stats, stop)) for _ in range(IDLE)]
    while stats["idle_open"] < IDLE and time.monotonic() < stop:
        await asyncio.sleep(0.05)
    print(json.dumps({"idle_open": stats["idle_open"]}), flush=True)
    abusers = [asyncio.create_task(_abuse(host, port, f"127.0.0.{2 + number}", stats, stop))
               for number in range(ABUSERS)]
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, done.set_result, None)  # report and stop
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done, timeout=max(0.1, stop - time.monotonic()))
    for task in (*idle, *abusers):
        task.cancel()
    print(json.dumps(dict(stats)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_auth_load")
    parser.add_argument("--attack", metavar="URL", required=True)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    _raise_fd_limit()
    asyncio.run(_attack(args.attack, args.seconds))


if __name__ == "__main__":
    main()
