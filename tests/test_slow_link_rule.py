"""Which node the slow-link finding blames, from the pairs' bandwidths alone (the real runs on shaped links are in
tests/test_slow_link.py)."""

from __future__ import annotations

import pandas as pd

from ddltrace.analyses.detect_slow_link import _common_node


def _pairs(*rows):
    return pd.DataFrame(rows, columns=["host_a", "host_b"])


def test_one_slow_pair_of_a_star_names_the_node_whose_every_pair_is_slow():
    """A parameter server on n0 with workers on n1-n3, n3's link shaped: only the pair n0-n3 is slow. Every pair
    through n3 is slow, n0's others are fast: n3's link (QA: the finding named the pair n0 - n3, as if either)."""
    bw = _pairs(("n0", "n1"), ("n0", "n2"), ("n0", "n3"))
    assert _common_node([("n0", "n3")], bw) == "n3"


def test_a_pair_of_two_nodes_alone_names_neither():
    assert _common_node([("n0", "n1")], _pairs(("n0", "n1"))) is None


def test_every_pair_through_one_node_slow_names_it():
    bw = _pairs(("n0", "n1"), ("n0", "n2"), ("n1", "n2"))
    assert _common_node([("n0", "n2"), ("n1", "n2")], bw) == "n2"
    assert _common_node([("n0", "n1"), ("n1", "n2"), ("n0", "n2")], bw) is None  # every pair: no one node
