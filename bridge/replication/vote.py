"""The quorum vote over core connections (docs/ha.md, "Quorum vote"): a node of a
replication pair without a lease asks the voters (:func:`ask`), and a voter answers
(:class:`Voter`), both logged in as the cluster user. The counting is the sans-IO
:class:`~bridge.replication.quorum.Ballot`'s; this is its glue.

Every wait is bounded by configuration: the whole vote by ``quorum-vote-wait``, a voter's
own try to reach the live node by the ``timeout_ms`` the request carries (half of the
asker's ``quorum-vote-wait``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.protocol import PACKET_TYPES, PROTOCOL_VERSION, decode_packet, encode_packet
from bridge.protocol import packets as p
from bridge.replication.interfaces import IVoter
from bridge.replication.quorum import Ballot, IBallotActions, Promises
from transport.endpoints import connect
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.urls import URL, parse_url


@attrs.frozen
class Login:
    """The cluster user's login, as a core client."""

    user: str
    password: str | None = attrs.field(repr=False)
    client_id: str


@attrs.frozen
class VoteOutcome:
    """A vote's result, for the asker, its log and its status."""

    won: bool
    reason: str
    grants: tuple[str, ...]
    seen: int
    """The highest activation sequence a voter said it granted or saw."""


def ask(
    reactor: Any,
    voters: Sequence[URL],
    login: Login,
    *,
    holder: str,
    about: str,
    sequence: int,
    needed: int,
    wait: float,
    why_not: str = "",
) -> Deferred[VoteOutcome]:
    """Ask every voter at once, as ``holder`` (``node/run``), about the live node at
    ``about`` ("": about this live node itself) and activation ``sequence``; fires once
    ``needed`` granted, once they cannot, or after ``wait`` seconds. Each voter may take
    half of ``wait`` to reach ``about``. ``why_not`` (non-empty: the asker may not take
    over, a backup not in sync) loses the vote unasked, saying why."""
    node_name = holder.rpartition("/")[0]
    request = p.VoteRequest(node_name, holder, about, sequence, round(wait * 500))
    return _Poll(reactor, tuple(voters), login, request, wait).run(needed, why_not)


@implementer(IBallotActions)
class _Poll:
    """One vote's connections to the voters, one each."""

    def __init__(
        self,
        reactor: Any,
        voters: tuple[URL, ...],
        login: Login,
        request: p.VoteRequest,
        wait: float,
    ) -> None:
        self._reactor = reactor
        self._voters = voters
        self._login = login
        self._request = request
        self._wait = wait
        self._ballot: Ballot | None = None
        self._askers: list[_Asker] = []
        self._asking = False
        self._timer: IDelayedCall | None = None
        self._done: Deferred[VoteOutcome] = Deferred()

    def run(self, needed: int, why_not: str) -> Deferred[VoteOutcome]:
        ballot = self._ballot = Ballot(
            self, tuple(str(url) for url in self._voters), needed, why_not
        )
        ballot.start()
        if self._asking:  # out of the machine's transition: answers may come at once
            self._timer = self._reactor.callLater(self._wait, ballot.timed_out)
            for url in self._voters:
                asker = _Asker(ballot, str(url), self._login, self._request)
                self._askers.append(asker)
                connecting = connect(self._reactor, url, asker, accepted_types=PACKET_TYPES)
                connecting.addErrback(asker.not_connected)
        return self._done

    # -- IBallotActions ------------------------------------------------------------------
    def ask(self) -> None:
        self._asking = True

    def decided(self, won: bool, reason: str) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        for asker in self._askers:
            asker.close()
        ballot = self._ballot
        assert ballot is not None
        outcome = VoteOutcome(won, reason, ballot.grants, ballot.seen)
        self._reactor.callLater(0, self._done.callback, outcome)  # after the transition


@implementer(IFrameReceiver)
class _Asker:
    """One voter's connection: log in, ask, count the answer."""

    def __init__(self, ballot: Ballot, voter: str, login: Login, request: p.VoteRequest) -> None:
        self._ballot = ballot
        self._voter = voter
        self._login = login
        self._request = request
        self._connection: IFrameConnection | None = None
        self._closed = False

    def not_connected(self, failure: Failure) -> None:
        self._ballot.unreachable(self._voter, failure.getErrorMessage())

    def connection_made(self, connection: IFrameConnection) -> None:
        if self._closed:
            connection.close()
            return
        self._connection = connection
        connection.send(*encode_packet(_connect(self._login, connection)))

    def frame_received(self, frame: Frame) -> None:
        connection = self._connection
        assert connection is not None
        try:
            packet = decode_packet(frame.type, frame.payload)
        except ValueError as error:
            self._ballot.unreachable(self._voter, f"a bad answer: {error}")
            connection.close(str(error))
            return
        if isinstance(packet, p.Connected):
            connection.logged_in()
            connection.send(*encode_packet(self._request))
        elif isinstance(packet, p.VoteReply):
            if packet.granted:
                self._ballot.granted(self._voter, packet.seen)
            else:
                self._ballot.refused(self._voter, packet.reason, packet.seen)
            connection.close()
        elif isinstance(packet, p.Failed):
            self._ballot.refused(self._voter, f"refused: {packet.message}", 0)
            connection.close()
        else:
            self._ballot.unreachable(self._voter, f"{packet.TYPE.name} instead of VOTE_REPLY")
            connection.close()

    def connection_lost(self, reason: BaseException) -> None:
        self._connection = None
        self._ballot.unreachable(self._voter, str(reason) or type(reason).__name__)

    def close(self) -> None:
        self._closed = True
        if self._connection is not None:
            self._connection.close()


@implementer(IVoter)
class Voter:
    """A node's vote: it grants a backup's takeover only if it cannot reach the live node
    itself, and each activation sequence once (:class:`Promises`)."""

    def __init__(self, reactor: Any, login: Login) -> None:
        self._reactor = reactor
        self._login = login
        self.promises = Promises()

    def answer(self, request: p.VoteRequest) -> Deferred[p.VoteReply]:
        promises = self.promises
        if not request.about:
            granted, why = promises.still_live(request.sequence)
            return succeed(p.VoteReply(granted, why, promises.seen))
        refused = promises.before_probe(request.sequence)
        if refused:
            return succeed(p.VoteReply(False, refused, promises.seen))
        try:
            url = parse_url(request.about)
        except ValueError as error:
            return succeed(p.VoteReply(False, f"{request.about!r}: {error}", promises.seen))
        probed = probe(self._reactor, url, self._login, request.timeout_ms / 1000)

        def decide(result: tuple[bool, str]) -> p.VoteReply:
            granted, why = promises.takeover(request.sequence, *result)
            return p.VoteReply(granted, why, promises.seen)

        return probed.addCallback(decide)


def probe(reactor: Any, url: URL, login: Login, timeout: float) -> Deferred[tuple[bool, str]]:
    """Whether a node answers a core login at ``url`` within ``timeout`` seconds (a refused
    login is an answer: the node is up), and how it went."""
    done: Deferred[tuple[bool, str]] = Deferred()
    prober = _Probe(str(url), login, done.callback)
    timer = reactor.callLater(timeout, prober.give_up, f"no answer within {timeout:g} s")

    def ended(result: tuple[bool, str]) -> tuple[bool, str]:
        if timer.active():
            timer.cancel()
        return result

    done.addCallback(ended)
    connecting = connect(reactor, url, prober, accepted_types=PACKET_TYPES)
    connecting.addErrback(lambda failure: prober.end(False, failure.getErrorMessage()))
    return done


@implementer(IFrameReceiver)
class _Probe:
    """One try to log in at a node: the first outcome counts."""

    def __init__(self, url: str, login: Login, report: Callable[[tuple[bool, str]], object]):
        self._url = url
        self._login = login
        self._report: Callable[[tuple[bool, str]], object] | None = report
        self._connection: IFrameConnection | None = None

    def end(self, answers: bool, how: str) -> None:
        report, self._report = self._report, None
        if self._connection is not None:
            self._connection.close()
        if report is not None:
            report((answers, f"{self._url}: {how}"))

    def give_up(self, why: str) -> None:
        self.end(False, why)

    def connection_made(self, connection: IFrameConnection) -> None:
        self._connection = connection
        if self._report is None:
            connection.close()
            return
        connection.send(*encode_packet(_connect(self._login, connection)))

    def frame_received(self, frame: Frame) -> None:
        try:
            packet = decode_packet(frame.type, frame.payload)
        except ValueError as error:
            self.end(True, f"answered, unreadably: {error}")
            return
        if isinstance(packet, p.Connected):
            self.end(True, f"node {packet.node_name} accepted the login")
        elif isinstance(packet, p.Failed):
            self.end(True, f"answered, refusing the login: {packet.message}")

    def connection_lost(self, reason: BaseException) -> None:
        self._connection = None
        self.end(False, str(reason) or type(reason).__name__)


def _connect(login: Login, connection: IFrameConnection) -> p.Connect:
    return p.Connect(
        PROTOCOL_VERSION,
        login.client_id,
        login.user,
        login.password,
        0,
        connection.max_frame_size,
    )
