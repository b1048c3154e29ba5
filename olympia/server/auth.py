"""Who may call the REST catalog: bearer tokens from the operator's token file, access tokens
issued by ``POST /v1/oauth/tokens`` for OAuth2 client credentials, and the slow-down of
wrong secrets.

The token file has one client a line, ``<client-id> <read-only|read-write> <secret>``
(blank lines and ``#`` comments are skipped). A client sends its secret as a bearer token,
or trades its id and secret for a short-lived access token. Secrets are kept only as SHA-256
digests, looked up by digest and compared in constant time; no message names a secret.

Access tokens are stateless: ``<client id>.<access>.<expiry>.<signature>``, signed with
HMAC-SHA256 under a key drawn at random when the process starts. Issuing one keeps nothing in
memory; a restart invalidates every token issued before it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from olympia.exceptions import InvalidArgumentError
from olympia.lru import LruCache

K = TypeVar("K", bound=Hashable)
ACCESS_LEVELS = ("read-only", "read-write")
#: How long an issued access token is valid.
TOKEN_LIFETIME_SECONDS = 3600


@dataclass(frozen=True)
class Client:
    """A client of the token file.

    Args:
        client_id: Its name (the OAuth2 client id).
        writer: Whether it may change the catalog (``read-write``).
    """

    client_id: str
    writer: bool


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class Tokens:
    """The clients of a token file and the access tokens signed for them.

    Args:
        clients: Each client by the digest of its secret.
        lifetime: Seconds an issued access token stays valid.
        clock: The time in seconds (the Unix epoch), injected by tests.
    """

    def __init__(self, clients: dict[bytes, Client], lifetime: int = TOKEN_LIFETIME_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._clients = clients
        self._by_id = {client.client_id: digest for digest, client in clients.items()}
        self.lifetime = lifetime
        self._clock = clock
        self._key = secrets.token_bytes(32)

    @classmethod
    def load(cls, path: str | Path, clock: Callable[[], float] = time.time) -> Tokens:
        """Read a token file.

        Args:
            path: The file.
            clock: The time in seconds (the Unix epoch).

        Returns:
            Its clients.

        Raises:
            InvalidArgumentError: a malformed line (named by number, never by content), a
                client id or secret given twice, or no client at all.
            OSError: the file cannot be read.
        """
        clients: dict[bytes, Client] = {}
        ids: set[str] = set()
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split()
            if len(fields) != 3 or fields[1] not in ACCESS_LEVELS:
                raise InvalidArgumentError(
                    f"token file {path}, line {number}: expected '<client-id> "
                    "<read-only|read-write> <secret>'")
            client_id, access, secret = fields
            digest = _digest(secret)
            if client_id in ids or digest in clients:
                raise InvalidArgumentError(f"token file {path}, line {number}: client id or "
                                           "secret given twice")
            ids.add(client_id)
            clients[digest] = Client(client_id, access == "read-write")
        if not clients:
            raise InvalidArgumentError(f"token file {path} names no client")
        return cls(clients, clock=clock)

    def knows(self, client_id: str) -> bool:
        """Whether ``client_id`` is a client of the file."""
        return client_id in self._by_id

    def client_for(self, token: str) -> Client | None:
        """The client a bearer token (a secret of the file, or an access token signed here
        and not expired) belongs to; ``None`` for any other token."""
        client = self._clients.get(_digest(token))
        if client is not None:
            return client
        fields = self._claims(token)
        if fields is None:
            return None
        encoded_id, access, expiry = fields  # signed here: well formed
        if int(expiry) < self._clock():
            return None
        client_id = base64.urlsafe_b64decode(encoded_id + "=" * (-len(encoded_id) % 4))
        return Client(client_id.decode("utf-8"), access == "rw")

    def seconds_left(self, token: str) -> int:
        """Seconds before an access token signed here expires (0 for any other token)."""
        fields = self._claims(token)
        return max(0, int(fields[2]) - math.ceil(self._clock())) if fields else 0

    def signed(self, token: str) -> bool:
        """Whether ``token`` is an access token signed here, expired or not (a token that is
        not is a guess)."""
        return self._claims(token) is not None

    def _claims(self, token: str) -> list[str] | None:
        claims, _, signature = token.rpartition(".")
        fields = claims.split(".")
        if len(fields) != 3 or not hmac.compare_digest(self._sign(claims),
                                                       signature.encode("utf-8")):
            return None
        return fields

    def check(self, client_id: str, secret: str) -> Client | None:
        """The client whose id and secret these are, or ``None`` when they do not belong
        together (an unknown id costs the same digest and comparison as a known one)."""
        expected = self._by_id.get(client_id)
        given = _digest(secret)
        if not hmac.compare_digest(expected or bytes(len(given)), given) or expected is None:
            return None
        return self._clients[expected]

    def issue(self, client: Client) -> tuple[str, int]:
        """A signed access token for ``client``.

        Args:
            client: A client of the file (from :meth:`check` or :meth:`client_for`).

        Returns:
            The token and its lifetime in seconds.
        """
        encoded_id = base64.urlsafe_b64encode(client.client_id.encode("utf-8")).decode()
        expiry = math.ceil(self._clock()) + self.lifetime
        claims = f"{encoded_id.rstrip('=')}.{'rw' if client.writer else 'ro'}.{expiry}"
        return f"{claims}.{self._sign(claims).decode()}", self.lifetime

    def _sign(self, claims: str) -> bytes:
        mac = hmac.new(self._key, claims.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=")


#: Failed secrets a peer address or a client id may send at once (the bucket's size).
FAILURE_BURST = 10
#: Seconds after which one more failed secret is allowed (the bucket's refill).
FAILURE_INTERVAL = 1.0
#: Peer addresses whose failures, and (address, client id) pairs whose successes, are kept.
THROTTLE_ENTRIES = 4096


class Throttle:
    """Slows down wrong secrets: a token bucket per peer address and per client id, each
    holding ``burst`` failures and regaining one every ``interval`` seconds. A request whose
    peer or client id has no failure left is refused before its secret is checked.

    A client id under attack would lock its real client out; so an address that obtained a
    token for an id before keeps trying that id past the id's bucket (only its own address's
    bucket applies). Memory is bounded: peers and successes are kept in LRU caches of
    ``entries`` each, client ids are those of the token file, and every unknown id shares one
    bucket.

    Args:
        burst: Failures allowed at once.
        interval: Seconds to regain one.
        entries: Peers (and successful peer-id pairs) remembered.
        clock: Monotonic seconds, injected by tests.
    """

    def __init__(self, burst: int = FAILURE_BURST, interval: float = FAILURE_INTERVAL,
                 entries: int = THROTTLE_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._peers: LruCache[str, _Bucket] = LruCache(entries)
        self._ids: LruCache[str, _Bucket] = LruCache(entries)
        self._known: LruCache[tuple[str, str], bool] = LruCache(entries)
        self._lock = threading.Lock()

    def wait(self, peer: str, client_id: str | None) -> float:
        """Seconds before ``peer`` may try a secret for ``client_id``; 0: now.

        Args:
            peer: The client's address.
            client_id: The id it names (callers pass "" for every id not in the token file,
                so that unknown ids share one bucket), or ``None``: no id (only the peer's
                bucket applies).

        Returns:
            The seconds to wait.
        """
        now = self._clock()
        with self._lock:
            waits = [self._bucket(self._peers, peer, now).wait(self.interval)]
            if client_id is not None and (peer, client_id) not in self._known:
                waits.append(self._bucket(self._ids, client_id, now).wait(self.interval))
        return max(waits)

    def failed(self, peer: str, client_id: str | None) -> None:
        """Count a wrong secret from ``peer`` for ``client_id`` (as for :meth:`wait`)."""
        now = self._clock()
        with self._lock:
            self._bucket(self._peers, peer, now).spend()
            if client_id is not None:
                self._bucket(self._ids, client_id, now).spend()

    def succeeded(self, peer: str, client_id: str) -> None:
        """Remember that ``peer`` gave the right secret for ``client_id``."""
        self._known.put((peer, client_id), True)

    def _bucket(self, cache: LruCache[K, _Bucket], key: K, now: float) -> _Bucket:
        bucket = cache.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            cache.put(key, bucket)
        bucket.refill(now, self.burst, self.interval)
        return bucket


@dataclass
class _Bucket:
    """Failures left, as of ``at``."""

    left: float
    at: float

    def refill(self, now: float, burst: int, interval: float) -> None:
        self.left = min(float(burst), self.left + (now - self.at) / interval)
        self.at = now

    def spend(self) -> None:
        self.left = max(0.0, self.left - 1)

    def wait(self, interval: float) -> float:
        return 0.0 if self.left >= 1 else (1 - self.left) * interval
