"""Object keys, names and file paths of the format (spec "Tree Key Encoding", rulings 1,
5-7, 12-13)."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from enum import IntEnum
from urllib.parse import quote

from olympia.exceptions import CorruptFileError, InvalidNameError

CATALOG_DEF_KEY = "catalog_def"
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-"
MAX_VERSION = 2**32 - 1


class ObjectType(IntEnum):
    """Object type ids of the format."""

    CATALOG = 0
    NAMESPACE = 1
    TABLE = 2
    VIEW = 3
    DISTRIBUTED_TRANSACTION = 4

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


def encode_type_id(type_id: int) -> str:
    """The 4-character key prefix of a type id: 1 -> ``B===``."""
    digits = ""
    n = type_id
    while True:
        digits = _B64[n % 64] + digits
        n //= 64
        if n == 0:
            break
    if len(digits) > 4:
        raise ValueError(f"type id {type_id} does not fit 4 characters")
    return digits.ljust(4, "=")


PREFIX = {t: encode_type_id(t) for t in (ObjectType.NAMESPACE, ObjectType.TABLE, ObjectType.VIEW)}


@dataclass(frozen=True)
class NameLimits:
    """Maximum name sizes in bytes, from the catalog definition."""

    namespace: int = 100
    table: int = 100
    view: int = 100

    def of(self, kind: ObjectType) -> int:
        return {ObjectType.NAMESPACE: self.namespace, ObjectType.TABLE: self.table,
                ObjectType.VIEW: self.view}[kind]


def validate_name(kind: ObjectType, name: str, max_bytes: int) -> None:
    """Reject names the format forbids: empty, too long, control bytes, space or DEL."""
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind.label} name must be a string, got {type(name).__name__}")
    raw = name.encode("utf-8", errors="surrogatepass")
    if not raw:
        raise InvalidNameError(f"{kind.label} name must not be empty")
    if len(raw) > max_bytes:
        raise InvalidNameError(
            f"{kind.label} name {name!r} is {len(raw)} bytes; the catalog allows {max_bytes}"
        )
    bad = sorted({b for b in raw if b <= 0x20 or b == 0x7F})
    if bad:
        shown = ", ".join(f"0x{b:02X}" for b in bad)
        raise InvalidNameError(
            f"{kind.label} name {name!r} contains forbidden characters ({shown}): control "
            "characters, space and DEL are not allowed"
        )
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidNameError(f"{kind.label} name {name!r} is not valid UTF-8") from None


def _pad(name: str, size: int) -> str:
    return name + " " * (size - len(name.encode("utf-8")))


@dataclass(frozen=True, order=True)
class ObjectRef:
    """A namespace (``name`` empty), table or view, by name."""

    type: ObjectType
    namespace: str
    name: str = ""

    def __str__(self) -> str:
        if self.type == ObjectType.CATALOG:
            return "catalog definition"
        return self.namespace if self.type == ObjectType.NAMESPACE else (
            f"{self.namespace}.{self.name}"
        )

    @property
    def label(self) -> str:
        return f"{self.type.label} {self}"


class KeyCodec:
    """Encodes and decodes object keys for one catalog's name limits."""

    def __init__(self, limits: NameLimits) -> None:
        self.limits = limits

    def namespace_part(self, namespace: str) -> str:
        validate_name(ObjectType.NAMESPACE, namespace, self.limits.namespace)
        return _pad(namespace, self.limits.namespace)

    def key(self, ref: ObjectRef) -> str:
        ns = self.namespace_part(ref.namespace)
        if ref.type == ObjectType.NAMESPACE:
            return PREFIX[ObjectType.NAMESPACE] + ns
        size = self.limits.of(ref.type)
        validate_name(ref.type, ref.name, size)
        return PREFIX[ref.type] + ns + _pad(ref.name, size)

    def namespace_key(self, namespace: str) -> str:
        return self.key(ObjectRef(ObjectType.NAMESPACE, namespace))

    def children_prefix(self, kind: ObjectType, namespace: str) -> str:
        """Key prefix of every table (or view) of ``namespace``."""
        return PREFIX[kind] + self.namespace_part(namespace)

    def decode(self, key: str) -> ObjectRef:
        """The object a key names; raises CorruptFileError on a malformed key."""
        kind = next((k for k, prefix in PREFIX.items() if key.startswith(prefix)), None)
        if kind is None:
            raise CorruptFileError("object key", f"unknown key prefix in {key!r}")
        raw = key[4:].encode("utf-8")
        ns_size = self.limits.namespace
        namespace = raw[:ns_size].decode("utf-8").rstrip(" ")
        if kind == ObjectType.NAMESPACE:
            return ObjectRef(kind, namespace)
        return ObjectRef(kind, namespace, raw[ns_size:].decode("utf-8").rstrip(" "))


def version_path(version: int) -> str:
    """``vn/`` + the version's binary digits reversed, right-padded with 0 to 32 characters."""
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"version {version} is outside 0..{MAX_VERSION}")
    return "vn/" + format(version, "b")[::-1].ljust(32, "0")


def path_version(path: str) -> int | None:
    """The version of a ``vn/<bits>`` root path, or None for other files."""
    bits = path.removeprefix("vn/")
    if bits == path or len(bits) != 32 or set(bits) - {"0", "1"}:
        return None
    return int(bits[::-1], 2)


def _ident(name: str) -> str:
    return quote(name, safe="")


MAX_FILE_NAME_BYTES = 255  # ruling 12: the common limit of local file systems
DIGEST_HEX = 32  # hex digits kept of a SHA-256: 128 bits
_DEF_EXT = ".binpb"
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# {uuid4}.{digest} starts a definition file name written since ruling 13; before it, the
# uuid4 was followed by "-" or by ".binpb", never by "." and 32 hex digits.
_DIGEST_NAME = re.compile(rf"{_UUID}\.([0-9a-f]{{{DIGEST_HEX}}})(?:-|\.binpb$)")


def content_digest(content: bytes) -> str:
    """The checksum a definition file's name carries: the first 32 hex digits of the
    SHA-256 of the file's bytes."""
    return hashlib.sha256(content).hexdigest()[:DIGEST_HEX]


def hashed_name(name: str) -> str:
    """Ruling 12: ``~`` + the first 32 hex digits of the SHA-256 of the raw UTF-8 name."""
    return "~" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:DIGEST_HEX]


def def_file_name(stem: str, names: list[str]) -> str:
    """``{stem}-{name}...binpb`` with each name percent-encoded; while the result exceeds
    255 bytes, the longest part still encoded in full (the first on a tie) is replaced by
    its ``~`` hash (ruling 12)."""
    parts = [_ident(n) for n in names]
    hashed = [False] * len(parts)
    while len(stem) + sum(len(p) + 1 for p in parts) + len(_DEF_EXT) > MAX_FILE_NAME_BYTES:
        candidates = [i for i in range(len(parts)) if not hashed[i]]
        if not candidates:  # cannot happen with a 36 + 1 + 32 byte stem and <= 2 names
            raise ValueError(f"definition file name for {names!r} cannot fit 255 bytes")
        i = max(candidates, key=lambda j: len(parts[j]))
        parts[i], hashed[i] = hashed_name(names[i]), True
    return stem + "".join(f"-{p}" for p in parts) + _DEF_EXT


def def_path(ref: ObjectRef | None, content: bytes) -> str:
    """A fresh path for a definition file holding ``content`` (``ref`` None: the catalog
    definition): ``def/{kind}/{uuid4}.{digest}[-{ns}[-{name}]].binpb`` (rulings 6, 12, 13)."""
    stem = f"{uuid.uuid4()}.{content_digest(content)}"
    if ref is None:
        return f"def/catalog/{stem}{_DEF_EXT}"
    if ref.type == ObjectType.NAMESPACE:
        return f"def/namespace/{def_file_name(stem, [ref.namespace])}"
    folder = "table" if ref.type == ObjectType.TABLE else "view"
    return f"def/{folder}/{def_file_name(stem, [ref.namespace, ref.name])}"


def def_digest(path: str) -> str | None:
    """The content checksum a definition file's name carries (its last path segment), or
    None for a file written before ruling 13."""
    match = _DIGEST_NAME.match(path.rsplit("/", 1)[-1])
    return match.group(1) if match else None


def verify_def(content: bytes, where: str) -> None:
    """Check a definition file's bytes against the checksum in its name (``where``: its
    path or display URI). Files without one are accepted unverified.

    Raises:
        CorruptFileError: the content does not match.
    """
    expected = def_digest(where)
    if expected is not None:
        actual = content_digest(content)
        if actual != expected:
            raise CorruptFileError(where, f"checksum mismatch: content hashes to {actual}, "
                                   f"the file name records {expected}")


def dtxn_path(transaction_id: str) -> str:
    return f"dtxn/{_ident(transaction_id)}.binpb"
