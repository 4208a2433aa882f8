"""What the store says of a node whose agent's link ended early while the record folder is shared
(collectors/node_link.py, collectors/launcher.py's ``_link_notes``): an agent that is killed closes its end of the
link, which is no broken link; before, the note read "its agent's link broke (ConnectionError: connection closed
before the node's part was complete)" beside the note that the agent ended before writing its samples."""

from __future__ import annotations

import socket
import time

import pytest

from ddltrace.collectors.launcher import _link_notes
from ddltrace.collectors.node_link import Gatherer, _send


@pytest.fixture
def gatherer(tmp_path):
    g = Gatherer({"records": tmp_path / "records"}, bind="127.0.0.1")
    yield g
    g.close()


def _hello(gatherer, host: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gatherer.port))
    _send(sock, {"op": "hello", "token": gatherer.token, "host": host, "part": "/shared/.store.x", "shared": True})
    deadline = time.monotonic() + 10
    while host not in gatherer.nodes and time.monotonic() < deadline:
        time.sleep(0.01)
    return sock


def test_an_agent_that_closes_its_link_early_is_said_to_have_ended_not_its_link_to_have_broken(gatherer):
    _hello(gatherer, "n1").close()  # what the kernel does for a killed agent
    silent = _hello(gatherer, "n2")  # an agent that says nothing more
    links = gatherer.wait(0.5)
    silent.close()
    assert (links["n1"]["state"], links["n1"]["lost"]) == ("lost", "closed")
    assert (links["n2"]["state"], links["n2"]["lost"]) == ("lost", "silent")
    notes = _link_notes(links, "store")
    assert not any("broke" in n for n in notes), notes
    assert notes == [
        "node n1: its agent ended before it was done: its end of the link to this process closed early "
        "(ConnectionError: the node closed the connection before its part was complete), as it does when the agent "
        "is killed or dies, or its node goes down; its part is in the shared record folder and is read from there, "
        "as every node's; the clock measurements the agent sends at its end did not come",
        "node n2: its agent said nothing after the job (no word from the node for 0.5 s after the job): still "
        "writing, stuck, or its node unreachable; its part is in the shared record folder and is read from there, "
        "as every node's; the clock measurements the agent sends at its end did not come"]


def test_a_node_local_part_not_gathered_keeps_its_missing_node_note():
    links = {"n3": {"state": "lost", "lost": "closed", "shared": False, "part": "/local/.store.y",
                    "error": "ConnectionError: the node closed the connection before its part was complete"},
             "n4": {"state": "complete", "shared": True}}
    (note,) = _link_notes(links, "store")
    assert note.startswith("missing node n3: its part was not gathered (ConnectionError: the node closed the "
                           "connection before its part was complete); it stays on n3 in /local/.store.y"), note
