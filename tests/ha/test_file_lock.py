"""The live lock of a shared SQLite store directory: an exclusive flock on live.lock and
the epoch in the store; a release heard at once by the backups listening on the host. Two
FileLocks in one process are two open files of live.lock, so they exclude each other as
two processes would (flock locks an open file, not a process)."""

from __future__ import annotations

import os
import select
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.ha.lock import Holder
from bridge.store.file_lock import LOCK_FILE, NOTICES, WAITING, FileLock

TIMEOUT = 0.5


@pytest.fixture
def locks(tmp_path: Path):
    made: list[FileLock] = []

    def make(clock=None) -> FileLock:
        lock = FileLock(tmp_path / "shared", TIMEOUT, **({"clock": clock} if clock else {}))
        made.append(lock)
        return lock

    yield make
    for lock in made:
        lock.close()


def _stored(directory: Path) -> tuple[str, int]:
    connection = sqlite3.connect(directory / "messages.sqlite")
    try:
        row = connection.execute("SELECT holder, epoch FROM live_lock").fetchone()
    finally:
        connection.close()
    return row[0], row[1]


def test_one_holder_at_a_time_and_every_acquisition_raises_the_epoch(locks) -> None:
    a, b = locks(), locks()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, 5)
    assert taken is not None and (taken.holder, taken.epoch, taken.held) == (str(me), 1, True)
    assert b.acquire(other, 5) is None
    assert _stored(a.directory) == (str(me), 1)

    released = a.release(me, 1)
    assert released is not None and (released.epoch, released.expires) == (1, 0)
    assert _stored(a.directory) == ("", 1)  # the epoch is kept
    second = b.acquire(other, 5)
    assert second is not None and second.epoch == 2
    assert a.acquire(me, 5) is None


def test_renew_confirms_the_holder_and_the_epoch(locks) -> None:
    a, b = locks(), locks()
    me = Holder("a")
    taken = a.acquire(me, 5)
    assert taken is not None
    renewed = a.renew(me, taken.epoch, 5)
    assert renewed is not None and renewed.expires == renewed.now + 5000
    assert a.renew(me, taken.epoch + 1, 5) is None  # not this epoch
    assert b.renew(me, taken.epoch, 5) is None  # b holds no lock


def test_the_lock_goes_with_its_holder_process(locks, tmp_path: Path) -> None:
    """A holder killed with -9 gives the lock up with its process: the kernel does."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from bridge.ha.lock import Holder\n"
        "from bridge.store.file_lock import FileLock\n"
        "lock = FileLock(Path(sys.argv[1]), 0.5)\n"
        "assert lock.acquire(Holder('x'), 5) is not None\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "shared")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        b = locks()
        assert b.acquire(Holder("b"), 5) is None
        child.kill()
        child.wait(timeout=30)
        taken = b.acquire(Holder("b"), 5)
        assert taken is not None and taken.epoch == 2
    finally:
        child.kill()
        child.wait(timeout=30)


def test_a_removed_or_replaced_lock_file_is_a_lost_lock(locks) -> None:
    a, b = locks(), locks()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, 5)
    assert taken is not None
    os.unlink(a.directory / LOCK_FILE)  # an operator's mistake, or a shared fs's
    second = b.acquire(other, 5)  # locks the new file
    assert second is not None and second.epoch == 2
    assert a.renew(me, taken.epoch, 5) is None
    # a gave up its stale descriptor: its next try finds b's lock
    assert a.acquire(me, 5) is None


def test_a_renewal_finds_a_newer_epoch_in_the_store(locks) -> None:
    a = locks()
    me = Holder("a")
    taken = a.acquire(me, 5)
    assert taken is not None
    connection = sqlite3.connect(a.directory / "messages.sqlite")
    connection.execute("UPDATE live_lock SET holder = 'c/1', epoch = epoch + 1")
    connection.commit()
    connection.close()
    assert a.renew(me, taken.epoch, 5) is None
    assert a.release(me, taken.epoch) is None  # nothing of c's is cleared
    assert _stored(a.directory) == ("c/1", 2)


def test_backups_say_they_wait_and_old_entries_are_forgotten(locks) -> None:
    now = [1000.0]
    a, b, c = locks(lambda: now[0]), locks(lambda: now[0]), locks(lambda: now[0])
    me, second, third = Holder("a"), Holder("b"), Holder("c")
    assert a.acquire(me, 5) is not None
    assert b.acquire(second, 5) is None
    assert c.acquire(third, 5) is None
    b.waiting(second, 5)
    c.waiting(third, 5)
    assert a.waiting(None, 5) == tuple(sorted((str(second), str(third))))
    folder = a.directory / WAITING
    os.utime(folder / third.run, (now[0] - 6, now[0] - 6))  # not seen for a window
    assert a.waiting(None, 5) == (str(second),)
    os.utime(folder / third.run, (now[0] - 51, now[0] - 51))  # ten windows: forgotten
    assert a.waiting(None, 5) == (str(second),)
    assert not (folder / third.run).exists()
    # the one that acquires stops waiting
    assert a.release(me, 1) is not None
    assert b.acquire(second, 5) is not None
    assert not (folder / second.run).exists()


def test_read_shows_the_recorded_holder(locks) -> None:
    a, b = locks(), locks()
    assert b.read().holder == ""
    me = Holder("a")
    assert a.acquire(me, 5) is not None
    seen = b.read()
    assert (seen.node, seen.epoch, seen.held) == ("a", 1, True)
    assert a.release(me, 1) is not None
    assert b.read().held is False


def _heard(notices, seconds: float = 5.0) -> int:
    """The notices that arrive within ``seconds`` (waiting on the socket, not sleeping)."""
    readable, _, _ = select.select([notices.fileno()], [], [], seconds)
    return notices.received() if readable else 0


def test_a_release_is_heard_at_once_by_a_listening_backup_not_by_its_own_node(locks) -> None:
    a, b = locks(), locks()
    me = Holder("a")
    taken = a.acquire(me, 5)
    assert taken is not None
    own, backup = a.listen(), b.listen()
    assert sorted(entry.name for entry in (a.directory / NOTICES).iterdir()) == sorted(
        [own.name, backup.name]
    )
    assert a.release(me, taken.epoch) is not None
    assert _heard(backup) == 1
    assert own.received() == 0  # (sent, if at all, during the release)
    assert b.acquire(Holder("b"), 5) is not None


def test_a_lock_given_up_without_a_release_sends_no_notice(locks) -> None:
    """As when the live node dies: the backup takes it at its next try."""
    a, b = locks(), locks()
    assert a.acquire(Holder("a"), 5) is not None
    backup = b.listen()
    a.close()
    assert backup.received() == 0
    assert b.acquire(Holder("b"), 5) is not None


def test_names_of_sockets_gone_are_forgotten_and_a_closed_listener_leaves_none(locks) -> None:
    a, b = locks(), locks()
    me = Holder("a")
    taken = a.acquire(me, 5)
    assert taken is not None
    folder = a.directory / NOTICES
    folder.mkdir(exist_ok=True)
    (folder / ("0" * 32)).touch()  # a backup that died listening
    b.listen()
    b.close()
    assert [entry.name for entry in folder.iterdir()] == ["0" * 32]
    assert a.release(me, taken.epoch) is not None
    assert list(folder.iterdir()) == []
