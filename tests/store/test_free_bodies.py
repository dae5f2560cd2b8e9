"""Discarded large bodies' files kept to be written over: a new body takes a kept file
and ends at its own size; a body still read is kept only once closed, one linked
elsewhere is deleted; the bounds hold; nothing kept outlives the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import pytest_twisted

from bridge.message import LargeBody
from bridge.store.large import FREE_BODIES, FreeBodies
from tests.store.conftest import Stores, anycast, message


def _kept(stores: Stores) -> list[Path]:
    folder = stores.data_dir / FREE_BODIES
    return sorted(folder.iterdir()) if folder.is_dir() else []


def _written(store, message_id: int, body: bytes) -> LargeBody:  # type: ignore[no-untyped-def]
    writing = store.new_body(message_id)
    writing.write(body)
    large: LargeBody = writing.finish()
    return large


@pytest_twisted.ensureDeferred
async def test_a_discarded_body_is_written_over_by_the_next_and_cut_to_its_size(
    stores: Stores,
) -> None:
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    first = _written(store, 1, b"a" * 300_000)
    inode = os.stat(first.path).st_ino
    await store.add(message(1, body=b"", large=first), ["orders"])
    await store.acknowledge("orders", 1)
    await store.discard_body(first.path)
    assert not Path(first.path).exists()
    assert len(_kept(stores)) == 1

    second = _written(store, 2, b"b" * 100_000)
    assert os.stat(second.path).st_ino == inode  # the same file, written over
    assert _kept(stores) == []
    assert Path(second.path).read_bytes() == b"b" * 100_000
    await store.add(message(2, body=b"", large=second), ["orders"])
    store, recovered = await stores.reopen(store)
    [stored] = recovered.messages["orders"]
    reading = store.open_body(stored.message.large)
    try:
        assert reading.read() == b"b" * 100_000
    finally:
        await store.close_body(reading)


@pytest_twisted.ensureDeferred
async def test_a_body_discarded_while_it_is_read_is_kept_only_once_it_is_closed(
    stores: Stores,
) -> None:
    store, _ = await stores.open()
    first = _written(store, 1, b"r" * 200_000)
    reading = store.open_body(first)
    discarded = store.discard_body(first.path)
    second = _written(store, 2, b"w" * 200_000)  # a new file: nothing was kept
    assert os.stat(second.path).st_ino != os.stat(first.path).st_ino
    assert reading.read() == b"r" * 200_000
    assert _kept(stores) == []
    await store.close_body(reading)
    await discarded
    assert not Path(first.path).exists()
    assert len(_kept(stores)) == 1


@pytest_twisted.ensureDeferred
async def test_a_body_linked_elsewhere_is_deleted_not_kept(stores: Stores, tmp_path) -> None:
    """As a replication snapshot or a batch's pin links it: those still read its bytes."""
    store, _ = await stores.open()
    body = _written(store, 1, b"l" * 10_000)
    pin = tmp_path / "pin.msg"
    os.link(body.path, pin)
    await store.discard_body(body.path)
    assert _kept(stores) == []
    _written(store, 2, b"n" * 10_000)
    assert pin.read_bytes() == b"l" * 10_000


@pytest_twisted.ensureDeferred
async def test_kept_files_do_not_outlive_the_store(stores: Stores) -> None:
    store, _ = await stores.open()
    bodies = [_written(store, message_id, b"x" * 5000) for message_id in (1, 2)]
    for body in bodies:
        await store.discard_body(body.path)
    assert len(_kept(stores)) == 2
    store, _ = await stores.reopen(store)
    assert _kept(stores) == []
    fresh = _written(store, 3, b"y" * 10)
    assert Path(fresh.path).read_bytes() == b"y" * 10


@pytest.mark.parametrize(("files", "max_bytes", "kept"), [(2, 10**6, 2), (5, 2500, 2)])
def test_the_files_kept_are_bounded_in_number_and_bytes(
    tmp_path: Path, files: int, max_bytes: int, kept: int
) -> None:
    free = FreeBodies(tmp_path / "free", files=files, max_bytes=max_bytes)
    bodies = [tmp_path / f"{n}.msg" for n in range(4)]
    for path in bodies:
        path.write_bytes(b"z" * 1000)
    outcomes = [free.keep(str(path)) for path in bodies]
    assert outcomes == [True] * kept + [False] * (4 - kept)
    assert [path.exists() for path in bodies] == [False] * kept + [True] * (4 - kept)
    target = tmp_path / "new.msg"
    assert free.take(target) == 1000
    assert target.read_bytes() == b"z" * 1000
    assert free.keep(str(target))  # room again


def test_nothing_is_taken_when_nothing_is_kept_and_a_gone_file_is_not_kept(
    tmp_path: Path,
) -> None:
    free = FreeBodies(tmp_path / "free")
    assert free.take(tmp_path / "new.msg") is None
    assert not free.keep(str(tmp_path / "gone.msg"))
