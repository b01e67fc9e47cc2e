"""Who listens on a local port (`process.port_owner`), read from /proc: the proof that the server answering
is the one launched (`process.launch` refuses a port held by another program)."""

from __future__ import annotations

import os
import socket

from specfrontier.process.port_owner import port_ownership


def test_port_ownership_reads_proc_listeners() -> None:
    """Ours when the listener belongs to the group, someone else's otherwise, unknown with no listener."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        mine = port_ownership(port, os.getpgid(0))
        other = port_ownership(port, 1)
    assert mine.ours is True
    assert other.ours is False and other.foreign_pids == (os.getpid(),)
    assert port_ownership(port, os.getpgid(0)).ours is None  # closed: no listener to judge
