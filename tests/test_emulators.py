"""The storage emulators `make install` provides start and keep their stores' create-if-absent
rule: what a Google Cloud Storage or Azure catalog's commits will rest on."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from emulators import AZURITE_ACCOUNT, Azurite, FakeGcsServer


def _post(url: str, data: bytes, content_type: str = "application/octet-stream") -> int:
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.skipif(not FakeGcsServer.available(), reason="fake-gcs-server is not installed")
def test_fake_gcs_server_creates_an_object_only_if_absent() -> None:
    with FakeGcsServer() as gcs:
        base = gcs.endpoint_url
        assert _post(f"{base}/storage/v1/b?project=test", b'{"name": "cat"}',
                     "application/json") == 200
        put = f"{base}/upload/storage/v1/b/cat/o?uploadType=media&name=vn%2F1&ifGenerationMatch=0"
        assert _post(put, b"first") == 200
        assert _post(put, b"second") == 412  # the precondition a root's create uses
        with urllib.request.urlopen(f"{base}/storage/v1/b/cat/o/vn%2F1?alt=media") as got:
            assert got.read() == b"first"


@pytest.mark.skipif(not Azurite.available(), reason="Azurite is not installed")
def test_azurite_serves_and_refuses_unsigned_requests() -> None:
    with Azurite() as azure:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{azure.endpoint_url}/{AZURITE_ACCOUNT}?comp=list",
                                   timeout=10)
        assert refused.value.code == 403
