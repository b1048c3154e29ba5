"""The saved form of a plan: format version, checksum, optional HMAC signature, validation.

A saved plan is untrusted input. Reading one checks, in order: the format and its version
(version 1 plans are converted: their ``{"op", "args"}`` operations become flat typed ones;
version 3 is a targeted plan, version 2 plus ``targets``),
the checksum (accidental edits), the signature when a key is given (``OLYMPIA_PLAN_KEY``: the
plan must be signed with it, which proves it is the plan that was reviewed), then the shape
of every field against a JSON Schema. The operations are validated one by one when the
changes are read (:func:`olympia.plan.ops.parse_op`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from jsonschema import Draft202012Validator

from olympia.exceptions import InvalidArgumentError

PLAN_FORMAT = "olympia-plan"
PLAN_FORMAT_VERSION = 2
TARGETED_FORMAT_VERSION = 3  # a plan limited by --target: its targets, partial fingerprints
KEY_ENV = "OLYMPIA_PLAN_KEY"
SIGNATURE_ALGORITHM = "HMAC-SHA256"

_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["catalog", "base_version", "scope", "managed_namespaces", "fingerprints",
                 "spec", "changes"],
    "properties": {
        "catalog": {"type": "object", "required": ["uri", "id"],
                    "properties": {"uri": {"type": "string"}, "id": {"type": "string"}}},
        "base_version": {"type": "integer", "minimum": 0},
        "scope": {"type": "object", "required": ["declared"], "additionalProperties": False,
                  "properties": {"declared": _STRINGS, "patterns": _STRINGS,
                                 "references": {"type": "array", "items": {
                                     "type": "array", "items": {"type": "string"},
                                     "minItems": 2, "maxItems": 2}}}},
        "managed_namespaces": _STRINGS,
        "fingerprints": {"type": "object", "additionalProperties": {"type": "string"}},
        "spec": {"type": "object", "required": ["digest"],
                 "properties": {"digest": {"type": "string"}, "files": _STRINGS,
                                "git_commit": {"type": "string"}}},
        "warnings": _STRINGS,
        "created_at": {"type": "string"},
        "targets": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["type", "namespace"], "additionalProperties": False,
            "properties": {"type": {"enum": ["namespace", "table", "view"]},
                           "namespace": {"type": "string", "minLength": 1},
                           "object_name": {"type": "string", "minLength": 1}}}},
        "changes": {"type": "array", "items": {"type": "object"}},
    },
}
_VALIDATOR = Draft202012Validator(_SCHEMA)


def canonical(body: dict[str, Any]) -> bytes:
    """The bytes a checksum and a signature cover: sorted keys, no spaces, UTF-8."""
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(body)).hexdigest()


def signature(body: dict[str, Any], key: str) -> str:
    """HMAC-SHA256 of the canonical body with ``key``, as hex."""
    return hmac.new(key.encode(), canonical(body), hashlib.sha256).hexdigest()


def seal(body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """``body`` with its checksum and, when ``key`` is given, its signature."""
    out = {**body, "checksum": checksum(body)}
    if key:
        out["signature"] = {"algorithm": SIGNATURE_ALGORITHM, "value": signature(body, key)}
    return out


def unseal(data: Any, where: str, key: str | None = None) -> dict[str, Any]:
    """The body of a saved plan, checked and converted to the current format version.

    Args:
        data: The parsed JSON of the plan file.
        where: How to name the plan in messages (its path).
        key: When given, the plan must carry a valid signature made with it.

    Returns:
        The plan's body (without checksum and signature), in the current format version.

    Raises:
        InvalidArgumentError: not a plan, an unsupported version, a checksum or signature
            mismatch, or a malformed field (every problem named).
    """
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise InvalidArgumentError(f"{where}: not an {PLAN_FORMAT} file")
    version = data.get("format_version")
    if version not in (1, PLAN_FORMAT_VERSION, TARGETED_FORMAT_VERSION) or isinstance(
            version, bool):
        raise InvalidArgumentError(
            f"{where}: plan format version {str(version)[:20]} is not supported (this olympia "
            f"reads versions 1 to {TARGETED_FORMAT_VERSION}); re-plan")
    body = {k: v for k, v in data.items() if k not in ("checksum", "signature")}
    sealed = data.get("signature")
    if data.get("checksum") != checksum(body):
        raise InvalidArgumentError(f"{where}: the plan file was modified after it was "
                                   "saved (checksum mismatch); re-plan")
    if key:
        _check_signature(body, sealed, key, where)
    errors = sorted(_VALIDATOR.iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        raise InvalidArgumentError(f"{where}: malformed plan: " + "; ".join(
            f"{'.'.join(str(p) for p in e.absolute_path) or 'plan'}: {e.message[:160]}"
            for e in errors[:5]))
    if (version == TARGETED_FORMAT_VERSION) != ("targets" in body):
        raise InvalidArgumentError(f"{where}: malformed plan: targets go with format version "
                                   f"{TARGETED_FORMAT_VERSION} only, and it needs them")
    if version == 1:
        body = {**body, "format_version": PLAN_FORMAT_VERSION,
                "changes": [_convert_v1(c) for c in body["changes"]]}
    return body


def _check_signature(body: dict[str, Any], sealed: Any, key: str, where: str) -> None:
    if sealed is None:
        raise InvalidArgumentError(
            f"{where}: the plan is not signed, but {KEY_ENV} is set: only plans signed with "
            f"that key are applied; re-plan with the key set")
    value = sealed.get("value") if isinstance(sealed, dict) else None
    if (not isinstance(sealed, dict) or sealed.get("algorithm") != SIGNATURE_ALGORITHM
            or not isinstance(value, str)
            or not hmac.compare_digest(value, signature(body, key))):
        raise InvalidArgumentError(
            f"{where}: the plan's signature does not match {KEY_ENV} (signed with another "
            f"key, or modified after it was signed); re-plan")


def _convert_v1(change: dict[str, Any]) -> dict[str, Any]:
    """A version 1 change: its ``{"op": name, "args": {...}}`` operations made flat."""
    ops = change.get("ops")
    if not isinstance(ops, list):
        return change
    flat = [{**o["args"], "op": o.get("op")}
            if isinstance(o, dict) and isinstance(o.get("args"), dict) and set(o) <= {"op", "args"}
            else o for o in ops]
    return {**change, "ops": flat}
