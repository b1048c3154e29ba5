"""gc_paused (olympia.spec.yamlpos): the cyclic garbage collector pauses while a spec or a
plan's objects are built, and comes back as it was, also when uses nest or overlap."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from olympia.spec.yamlpos import gc_paused


@pytest.fixture
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_pauses_and_restores(collector: None) -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer use still holds it
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled(collector: None) -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_uses_from_threads(collector: None) -> None:
    """The last to leave restores it, whichever thread entered first."""
    gc.enable()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with gc_paused():
        thread.start()
        assert entered.wait(10)
    assert not gc.isenabled()  # the other thread is still inside
    release.set()
    thread.join(10)
    assert gc.isenabled()
