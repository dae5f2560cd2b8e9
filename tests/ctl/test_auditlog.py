"""The node's security audit log: the store's records reach the Twisted log under
``txbridge.security.audit``, successful logins included, in the one documented format,
and never with a password; logins hashed in worker threads are logged from the reactor."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from bridge.ctl.auditlog import route_audit_log
from security import AuthenticationFailed, SecurityAuth, SecurityStore, load_security
from security.audit import AUDIT_LOGGER_NAME, audit_logger
from tests.security.helpers import FakeClock, write_users

SECRET = "S3cret-Pa55word!"
GUESS = "gue55-Of-An-Attacker"


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == AUDIT_LOGGER_NAME:
            seen.append({**event, "thread": threading.current_thread()})

    globalLogPublisher.addObserver(observe)
    undo = route_audit_log(reactor)
    try:
        yield seen
    finally:
        undo()
        globalLogPublisher.removeObserver(observe)


@pytest.fixture
def store(tmp_path: Path) -> SecurityStore:
    users = write_users(tmp_path / "users.toml", {"alice": (SECRET, ["producers"])})
    table = {"users-file": str(users)}
    return SecurityStore(load_security(table, str(tmp_path / "node.toml")), FakeClock())


def login(store: SecurityStore, password: str) -> None:
    store.authenticate(SecurityAuth("alice", password, (), "203.0.113.9:41000", "stomp"))


@pytest_twisted.ensureDeferred
async def test_failed_and_successful_logins_reach_the_twisted_log(
    events: list[dict[str, Any]], store: SecurityStore
) -> None:
    with pytest.raises(AuthenticationFailed):
        login(store, GUESS)
    # Logins hash in worker threads: their lines are written from the reactor thread.
    await deferToThread(login, store, SECRET)
    deadline = reactor.seconds() + 10  # type: ignore[attr-defined]
    while len(events) < 2 and reactor.seconds() < deadline:  # type: ignore[attr-defined]
        await deferToThread(lambda: None)  # a reactor turn for callFromThread's call
    who = "user=alice remote=203.0.113.9:41000 protocol=stomp action=login"
    assert [(e["log_level"], formatEvent(e)) for e in events] == [
        (
            LogLevel.warn,
            f"{who} outcome=failure certificate=- failures=1 refused_for=0 host_delay=0",
        ),
        (LogLevel.info, f"{who} outcome=success method=password roles=producers"),
    ]
    assert {e["thread"] for e in events} == {threading.main_thread()}
    assert events[1]["audit"]["outcome"] == "success"
    for event in events:
        assert SECRET not in repr(event) and GUESS not in repr(event)


def test_routing_is_undone() -> None:
    level, handlers = audit_logger.level, list(audit_logger.handlers)
    undo = route_audit_log(reactor)
    assert audit_logger.level == logging.INFO
    assert len(audit_logger.handlers) == len(handlers) + 1
    undo()
    assert (audit_logger.level, audit_logger.handlers) == (level, handlers)
