"""The SeaweedFS fixture itself: conditional puts are honoured, and stop() ends the process."""

from __future__ import annotations

import os
import socket

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


def test_a_start_whose_port_was_taken_tries_new_ports() -> None:
    """Ports are picked free and bound later by the server: when another process took
    one in between, the server exits, and the start is tried again on new ports. Its log
    files stay in its work folder (removed at stop), not in the system's /tmp."""
    server = SeaweedS3Server()
    taken = server.s3_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", taken))  # bound, not listening: requests are refused
        server.start()
    try:
        assert server.s3_port != taken
        assert any(p.name.startswith("weed.") for p in server.workdir.iterdir())
        assert server.filesystem().exists(server.bucket)
    finally:
        server.stop()
