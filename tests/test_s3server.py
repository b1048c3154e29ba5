"""The SeaweedFS fixture itself: conditional puts are honoured, and stop() ends the process."""

from __future__ import annotations

import os

import pytest
from s3server import SeaweedS3Server

pytestmark = pytest.mark.s3


def test_conditional_put_is_refused_on_existing_key(s3_server: SeaweedS3Server) -> None:
    fs = s3_server.filesystem()
    path = f"{s3_server.bucket}/cond/key"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(OSError, match="pre-conditions"):
        fs.pipe_file(path, b"second", mode="create")
    assert fs.cat_file(path) == b"first"


def test_stop_kills_only_our_process() -> None:
    server = SeaweedS3Server().start()
    assert server.process is not None
    pid = server.process.pid
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not server.workdir.exists()
