"""ddltrace.quiet_gc: no collection while a command loads its libraries, what they loaded frozen, then collecting
again as before."""

import gc

from ddltrace import quiet_gc


def test_no_collection_while_loading_then_frozen_and_collecting_again():
    collections = []
    callback = lambda phase, info: collections.append(info["generation"]) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(callback)
    frozen_before = gc.get_freeze_count()
    try:
        with quiet_gc.loading():
            loaded = [[i] for i in range(100_000)]  # ~140 collections' worth of containers at the default thresholds
            assert not gc.isenabled()
        assert collections == []
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen_before + len(loaded)
        cycle = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # a cycle made afterwards is still freed
    finally:
        gc.callbacks.remove(callback)
        gc.unfreeze()


def test_a_collector_off_before_stays_off():
    gc.disable()
    try:
        with quiet_gc.loading():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
