"""The node agents' link (collectors/node_link.py) on real sockets, without namespaces: the clock ping-pong
measures a known clock offset within its stated uncertainty; parts are written where they belong, byte for
byte; a connection without the run's token, a file name leaving the run's folders, a node that stops in the
middle of a file or says nothing are refused or named as lost, and nothing is written outside the folders."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from ddltrace.collectors.node_link import AgentLink, Gatherer, _send


@pytest.fixture
def gatherer(tmp_path):
    g = Gatherer({"records": tmp_path / "records", "framework": tmp_path / "framework"}, bind="127.0.0.1")
    yield g
    g.close()


def test_ping_pong_measures_a_known_offset_and_a_part_arrives_whole(gatherer, tmp_path):
    part = tmp_path / "node" / "records"
    (part / "nodes" / "n1").mkdir(parents=True)
    payload = bytes(range(256)) * 5000
    (part / "rank-00002.pmpi").write_bytes(payload)
    (part / "nodes" / "n1" / "agent.lock").write_bytes(b"")
    ahead = 7_000_000  # this "node"'s clock is 7 ms ahead
    link = AgentLink(f"127.0.0.1:{gatherer.port}", gatherer.token, "n1", str(tmp_path / "node"), False,
                     lambda: time.time_ns() + ahead)
    start = link.ping_pong()
    assert abs(start["offset_ns"] + ahead) <= start["uncertainty_ns"]
    assert link.send_tree(str(part), "records") == (2, len(payload))
    link.finish({"clock_start": start, "clock_end": link.ping_pong()})
    nodes = gatherer.wait(5)
    assert nodes["n1"]["state"] == "complete" and nodes["n1"]["bytes"] == len(payload)
    assert (tmp_path / "records" / "rank-00002.pmpi").read_bytes() == payload
    assert (tmp_path / "records" / "nodes" / "n1" / "agent.lock").read_bytes() == b""


def _raw(gatherer, hello: dict) -> socket.socket:
    """A connection that said ``hello``, once the gatherer has read it (or refused it)."""
    sock = socket.create_connection(("127.0.0.1", gatherer.port))
    _send(sock, {"op": "hello", **hello})
    deadline = time.monotonic() + 10
    while hello["host"] not in gatherer.nodes and (hello["token"] == gatherer.token or gatherer._greeting) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    return sock


def test_a_connection_without_the_runs_token_is_ignored(gatherer, tmp_path):
    sock = _raw(gatherer, {"token": "not-it", "host": "intruder", "part": "/x", "shared": False})
    with contextlib.suppress(OSError):  # the gatherer may have closed it already
        _send(sock, {"op": "file", "name": "records/evil", "size": 3})
        sock.sendall(b"abc")
    sock.close()
    assert "intruder" not in gatherer.wait(1)
    assert not (tmp_path / "records" / "evil").exists()


def test_a_file_name_leaving_the_runs_folders_is_refused(gatherer, tmp_path):
    sock = _raw(gatherer, {"token": gatherer.token, "host": "n2", "part": "/x", "shared": False})
    _send(sock, {"op": "file", "name": "records/../../escaped", "size": 3})
    sock.sendall(b"abc")
    nodes = gatherer.wait(5)
    sock.close()
    assert nodes["n2"]["state"] == "lost" and "outside the run's folders" in nodes["n2"]["error"]
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "escaped").exists()


def test_a_node_that_stops_in_a_file_or_says_nothing_is_lost(gatherer, tmp_path):
    cut = _raw(gatherer, {"token": gatherer.token, "host": "n3", "part": "/local/run", "shared": False})
    _send(cut, {"op": "file", "name": "records/rank-00003.pmpi", "size": 1000})
    cut.sendall(b"x" * 10)
    cut.close()
    silent = _raw(gatherer, {"token": gatherer.token, "host": "n4", "part": "/local/run", "shared": False})
    nodes = gatherer.wait(0.5)
    silent.close()
    assert nodes["n3"]["state"] == "lost" and "rank-00003.pmpi" in nodes["n3"]["error"]
    assert nodes["n4"]["state"] == "lost" and "no word from the node for 0.5 s" in nodes["n4"]["error"]
    # the cut file is not left truncated where the recovery would take it for rank 3's records
    assert not list((tmp_path / "records").glob("*rank-00003*"))


def test_a_node_at_work_after_its_ranks_is_waited_for(gatherer, tmp_path):
    """Its keep-alives hold the launcher's wait open longer than a silent node would get."""
    link = AgentLink(f"127.0.0.1:{gatherer.port}", gatherer.token, "n5", str(tmp_path), True, time.time_ns)
    link.keep_alive(every_s=0.1)
    start = link.ping_pong()
    done = threading.Timer(1.5, link.finish, args=({"clock_start": start},))  # "writing" for 1.5 s
    done.start()
    t0 = time.monotonic()
    nodes = gatherer.wait(0.5)
    done.join()
    assert nodes["n5"]["state"] == "complete" and time.monotonic() - t0 >= 1.4
