"""Logins off the reactor, with the node's memory bounded whatever arrives.

A login the cache does not answer runs scrypt: a fraction of a second of CPU and 128 MiB
of memory (up to 256 MiB for the costliest hash a users file may hold). Every protocol
head of a node hands its logins to one :class:`Logins`, which lets at most
``max-concurrent-hashes`` of them run in threads at once and keeps at most
``max-queued-logins`` more waiting; a login beyond those is refused at once with
:class:`~security.errors.LoginsBusy`. Before it queues, a login from a host with recent
failed logins waits out that host's short delay (:meth:`SecurityStore.login_delay`) on
the reactor's clock: nothing sleeps and no thread is held meanwhile.

A head cancels the login of a connection that closed before its answer: a waiting one
leaves the queue (a flood of logins that hang up costs no hash), a delayed one never
queues, and a hash already running finishes in its thread, still counted, its answer
dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure

from security import SecurityStore
from security.audit import audit, audit_logger
from security.auth import SecurityAuth
from security.errors import LoginsBusy
from security.subject import Subject

RunInThread = Callable[[Callable[[SecurityAuth], Subject], SecurityAuth], "Deferred[Subject]"]
"""Runs ``function(auth)`` in a worker thread; its Deferred fires on the reactor."""


@attrs.define
class _Waiting:
    auth: SecurityAuth
    result: Deferred[Subject]


class Logins:
    """One node's logins: at most ``max-concurrent-hashes`` hashing, ``max-queued-logins``
    waiting, the rest refused at once (the limits are read from the store's settings at
    each login, so a reload changes them)."""

    def __init__(
        self,
        reactor: Any,
        security: SecurityStore,
        run_in_thread: RunInThread | None = None,
    ) -> None:
        self._reactor = reactor
        self._security = security
        self._run_in_thread = run_in_thread or self._in_reactor_pool
        self._hashing = 0
        self._waiting: deque[_Waiting] = deque()

    @property
    def hashing(self) -> int:
        """Logins running in threads now."""
        return self._hashing

    @property
    def queued(self) -> int:
        """Logins waiting for a thread."""
        return len(self._waiting)

    def authenticate(self, auth: SecurityAuth) -> Deferred[Subject]:
        """The subject ``auth`` proves; fails with AuthenticationFailed (LoginsBusy when
        the node has no room for another login now)."""
        security = self._security
        if not security.enabled:
            return succeed(security.authenticate(auth))
        delay = security.login_delay(auth.remote_address)
        if delay > 0:
            later: Deferred[None] = deferLater(self._reactor, delay, lambda: None)
            return later.addCallback(lambda _: self._admit(auth))
        return self._admit(auth)

    def _admit(self, auth: SecurityAuth) -> Deferred[Subject]:
        settings = self._security.settings
        if self._hashing < settings.max_concurrent_hashes:
            return self._start(auth)
        if len(self._waiting) >= settings.max_queued_logins:
            audit(
                audit_logger,
                logging.WARNING,
                user=auth.user,
                remote=auth.remote_address,
                protocol=auth.protocol,
                action="login",
                outcome="busy",
                hashing=self._hashing,
                queued=len(self._waiting),
            )
            refused: Deferred[Subject] = Deferred()
            refused.errback(LoginsBusy(self._hashing, len(self._waiting)))
            return refused
        waiting = _Waiting(auth, Deferred(lambda _: self._leave(waiting)))
        self._waiting.append(waiting)
        return waiting.result

    def _leave(self, waiting: _Waiting) -> None:
        """A waiting login was cancelled (its connection closed): it never hashes."""
        if waiting in self._waiting:
            self._waiting.remove(waiting)

    def _start(self, auth: SecurityAuth) -> Deferred[Subject]:
        """Hash in a thread. The caller gets a Deferred of its own: cancelling it drops
        the answer, while the hash, which cannot be stopped, keeps its place until done."""
        self._hashing += 1
        answer: Deferred[Subject] = Deferred()
        running = self._run_in_thread(self._security.authenticate, auth)
        running.addBoth(self._finished).addBoth(_answer, answer)
        return answer

    def _finished(self, result: Subject | Failure) -> Subject | Failure:
        self._hashing -= 1
        limit = self._security.settings.max_concurrent_hashes
        while self._waiting and self._hashing < limit:
            waiting = self._waiting.popleft()
            self._start(waiting.auth).addBoth(_answer, waiting.result)
        return result

    def _in_reactor_pool(
        self, function: Callable[[SecurityAuth], Subject], auth: SecurityAuth
    ) -> Deferred[Subject]:
        result: Deferred[Subject] = deferToThreadPool(
            self._reactor, self._reactor.getThreadPool(), function, auth
        )
        return result


def _answer(result: Subject | Failure, answer: Deferred[Subject]) -> None:
    """Fire ``answer`` with ``result``, unless it was cancelled meanwhile."""
    if answer.called:
        return
    if isinstance(result, Failure):
        answer.errback(result)
    else:
        answer.callback(result)
