"""Several processes write and read one file store at once: every read sees a complete value that
some writer wrote, and nothing is lost."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

from distrai.store import FileStore, NotFound

WORKERS = 4
ROUNDS = 25
VALUE_BYTES = 96 * 1024
SHARED_KEYS = ("shared/a", "shared/b")


def value(writer: int, round_: int, key: str) -> bytes:
    """The bytes writer `writer` puts under `key` in round `round_`: large, and different for each."""
    seed = hashlib.sha256(f"{writer}|{round_}|{key}".encode()).digest()
    return seed * (VALUE_BYTES // len(seed))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def own_key(writer: int, round_: int) -> str:
    return f"own/{writer}/{round_:03d}"


def work(root: str, writer: int, start: Barrier, results: Queue) -> None:
    """Write own and shared keys, read shared keys and the other writers' keys; report what was read."""
    store = FileStore(root)
    seen: list[tuple[str, str]] = []
    listed: list[str] = []
    start.wait()
    for round_ in range(ROUNDS):
        shared = SHARED_KEYS[(writer + round_) % 2]
        store.put(shared, value(writer, round_, shared))
        store.put(own_key(writer, round_), value(writer, round_, "own"))
        for key in (*SHARED_KEYS, own_key((writer + 1) % WORKERS, round_)):
            try:
                seen.append((key, digest(store.get(key, max_bytes=VALUE_BYTES))))
            except NotFound:
                seen.append((key, "absent"))
        listed.extend(store.list())
    results.put((writer, seen, listed))


def test_concurrent_processes_see_only_complete_values_and_lose_nothing(tmp_path: Path) -> None:
    initial = FileStore(tmp_path)
    for key in SHARED_KEYS:
        initial.put(key, value(WORKERS, 0, key))
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(WORKERS), context.Queue()
    processes = [
        context.Process(target=work, args=(str(tmp_path), writer, start, results))
        for writer in range(WORKERS)
    ]
    for process in processes:
        process.start()
    reports = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert sorted(writer for writer, _, _ in reports) == list(range(WORKERS))

    written = {
        key: {digest(value(writer, round_, key)) for writer in range(WORKERS) for round_ in range(ROUNDS)}
        | {digest(value(WORKERS, 0, key))}
        for key in SHARED_KEYS
    }
    own_keys = {
        own_key(writer, round_): digest(value(writer, round_, "own"))
        for writer in range(WORKERS)
        for round_ in range(ROUNDS)
    }
    reads = 0
    for _, seen, listed in reports:
        for key, seen_digest in seen:
            if key in own_keys:
                assert seen_digest in (own_keys[key], "absent"), f"torn or foreign value under {key}"
            else:
                assert seen_digest in written[key], f"torn or foreign value under {key}"
                reads += 1
        assert set(listed) <= set(own_keys) | set(SHARED_KEYS), "a temp file or stray name was listed"
    assert reads == WORKERS * ROUNDS * len(SHARED_KEYS)

    store = FileStore(tmp_path)
    assert store.list() == sorted([*own_keys, *SHARED_KEYS])
    for key, expected in own_keys.items():
        assert digest(store.get(key, max_bytes=VALUE_BYTES)) == expected
    for key in SHARED_KEYS:
        assert digest(store.get(key, max_bytes=VALUE_BYTES)) in written[key]
    leftovers = [name for _, _, files in os.walk(tmp_path) for name in files if name.endswith("~tmp")]
    assert leftovers == []
