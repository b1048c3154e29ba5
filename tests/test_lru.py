"""The bounded LRU cache every in-memory cache of the library uses."""

from __future__ import annotations

import threading

from olympia.lru import LruCache


def test_putting_past_the_size_drops_the_least_recently_used() -> None:
    dropped: list[str] = []
    cache: LruCache[str, str] = LruCache(2, on_evict=dropped.append)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # now b is the least recently used
    cache.put("c", "C")
    assert dropped == ["B"]
    assert "b" not in cache and cache.get("b") is None
    assert cache.get("a") == "A" and cache.get("c") == "C" and len(cache) == 2


def test_getting_many_marks_each_found_key_as_used() -> None:
    dropped: list[str] = []
    cache: LruCache[str, str] = LruCache(3, on_evict=dropped.append)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get_many(["b", "x", "a"]) == ["B", None, "A"]  # c is now the oldest
    cache.put("d", "D")
    assert dropped == ["C"]


def test_putting_a_kept_key_replaces_it_as_the_most_recent() -> None:
    dropped: list[int] = []
    cache: LruCache[str, int] = LruCache(2, on_evict=dropped.append)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 3)
    cache.put("c", 4)
    assert dropped == [2]
    assert cache.get("a") == 3


def test_a_size_of_zero_keeps_nothing() -> None:
    dropped: list[int] = []
    cache: LruCache[str, int] = LruCache(0, on_evict=dropped.append)
    cache.put("a", 1)
    assert cache.get("a") is None and dropped == [1] and len(cache) == 0


def test_threads_putting_and_getting_at_once_keep_the_bound() -> None:
    dropped: list[int] = []
    lock = threading.Lock()

    def evicted(value: int) -> None:
        with lock:
            dropped.append(value)

    cache: LruCache[int, int] = LruCache(50, on_evict=evicted)
    start = threading.Barrier(8)

    def work(thread: int) -> None:
        start.wait()
        for i in range(2000):
            key = thread * 2000 + i
            cache.put(key, key)
            cache.get(key - 1)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 50
    kept = [k for k in range(16000) if k in cache]
    assert sorted(dropped + kept) == list(range(16000))  # each value dropped once or kept
