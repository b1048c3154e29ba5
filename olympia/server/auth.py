"""Who may call the REST catalog: bearer tokens from the operator's token file, and access
tokens issued by ``POST /v1/oauth/tokens`` for OAuth2 client credentials.

The token file has one client a line, ``<client-id> <read-only|read-write> <secret>``
(blank lines and ``#`` comments are skipped). A client sends its secret as a bearer token,
or trades its id and secret for a short-lived access token. Secrets and tokens are kept only
as SHA-256 digests, looked up by digest and compared in constant time; no message names a
secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from olympia.exceptions import InvalidArgumentError

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
    """The clients of a token file and the access tokens issued to them.

    Args:
        clients: Each client by the digest of its secret.
        lifetime: Seconds an issued access token stays valid.
    """

    def __init__(self, clients: dict[bytes, Client],
                 lifetime: int = TOKEN_LIFETIME_SECONDS) -> None:
        self._clients = clients
        self._by_id = {client.client_id: digest for digest, client in clients.items()}
        self._lifetime = lifetime
        self._issued: dict[bytes, tuple[Client, float]] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> Tokens:
        """Read a token file.

        Args:
            path: The file.

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
        return cls(clients)

    def client_for(self, token: str) -> Client | None:
        """The client a bearer token (a secret of the file, or an access token issued and
        not expired) belongs to; ``None`` for any other token."""
        digest = _digest(token)
        client = self._clients.get(digest)
        if client is not None:
            return client
        with self._lock:
            issued = self._issued.get(digest)
        if issued is None or issued[1] < time.monotonic():
            return None
        return issued[0]

    def issue(self, client_id: str, secret: str) -> tuple[str, int] | None:
        """An access token for OAuth2 client credentials.

        Args:
            client_id: The client id.
            secret: Its secret.

        Returns:
            The token and its lifetime in seconds, or ``None`` when the id and secret do not
            belong together.
        """
        expected = self._by_id.get(client_id)
        given = _digest(secret)
        if not hmac.compare_digest(expected or bytes(len(given)), given) or expected is None:
            return None
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._issued = {d: t for d, t in self._issued.items() if t[1] >= now}
            self._issued[_digest(token)] = (self._clients[expected], now + self._lifetime)
        return token, self._lifetime
