"""ddltrace.enclosing: the innermost span around an interval on its lane, checked against a brute force."""

from __future__ import annotations

import numpy as np

from ddltrace.enclosing import innermost_enclosing


def brute(spans, queries):
    """The innermost enclosing span by definition: of the spans on the lane that start at or before the query and
    end at or after it, the latest to start, at one start the shorter; -1 where none."""
    out = []
    for lane, t0, t1 in queries:
        around = [(s, -e, i) for i, (lane_s, s, e) in enumerate(spans) if lane_s == lane and s <= t0 and e >= t1]
        out.append(max(around)[2] if around else -1)
    return out


def test_nested_spans_on_two_lanes_against_the_definition():
    rng = np.random.default_rng(7)
    spans, queries = [], []
    for lane in (0, 1):
        for _ in range(20):  # random nesting and overlap, ties of start included
            s = int(rng.integers(0, 100)) * 10
            spans.append((lane, s, s + int(rng.integers(0, 20)) * 10))
        queries += [(lane, int(t), int(t) + int(rng.integers(0, 30))) for t in rng.integers(0, 1000, 60)]
    s, q = np.array(spans), np.array(queries)
    got = innermost_enclosing(s[:, 0], s[:, 1], s[:, 2], q[:, 0], q[:, 1], q[:, 2], depth=len(spans))
    assert got.tolist() == brute(spans, queries)
    assert (got >= 0).sum() > 20 and (got < 0).sum() > 5  # both kinds of answer were asked for


def test_the_depth_bounds_the_look_back():
    """An outer span with four later-starting spans ended before the query: found looking back 5, not 4."""
    spans = np.array([[0, 0, 100], [0, 10, 11], [0, 20, 21], [0, 30, 31], [0, 40, 41]])
    query = np.array([[0, 50, 60]])
    args = (spans[:, 0], spans[:, 1], spans[:, 2], query[:, 0], query[:, 1], query[:, 2])
    assert innermost_enclosing(*args, depth=5).tolist() == [0]
    assert innermost_enclosing(*args, depth=4).tolist() == [-1]
