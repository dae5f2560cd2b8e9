"""The node's ``/status`` document, and ``txbridge ctl ... status`` that reads it.

The attrs classes here are the one schema of the document: the management API builds a
:class:`Status` and serves :meth:`Status.to_json`; the command line checks what it gets
with :meth:`Status.from_json`, so a wrong answer is named (the key and what was expected)
instead of failing somewhere in the table. Unknown keys are ignored, so an older
``txbridge`` reads a newer node.

``txbridge ctl --url URL [--user U --password P] ACTION`` is the operator's handle on a
running node; ``status`` is its first action. It is a blocking command, so it speaks HTTP
with the standard library. Every failure is one line on stderr naming the URL, and exit
status 2.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import http.client
import json
import math
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from types import UnionType
from typing import Any, TypeVar, get_args, get_origin
from urllib.parse import quote, urlsplit

import attrs
from attrs import AttrsInstance

EXIT_FAILED = 2
MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""A bigger answer is refused rather than held: no node's status is near this."""

_T = TypeVar("_T", bound=AttrsInstance)


@attrs.frozen
class NodeStatus:
    name: str
    id: str
    uptime_seconds: float
    connections: int


@attrs.frozen
class AddressStatus:
    name: str
    routing: str
    queues: tuple[str, ...]
    memory_bytes: int
    max_size_bytes: int
    address_full_policy: str
    full: bool
    paged_messages: int
    paged_bytes: int
    messages_paged: int
    messages_dropped: int
    sends_refused: int


@attrs.frozen
class QueueStatus:
    name: str
    address: str
    durable: bool
    depth: int
    waiting: int
    in_flight: int
    consumers: int
    messages_added: int
    messages_acknowledged: int
    messages_dropped: int


@attrs.frozen
class BridgeStatus:
    """One bridge, as :class:`bridge.forward.status.BridgeSnapshot` has it."""

    name: str
    state: str
    queue: str
    targets: tuple[str, ...]
    connected_to: str | None
    last_error: str | None
    messages_forwarded: int
    bytes_forwarded: int
    messages_skipped: int
    pending_confirmations: int
    paused_writability_seconds: float
    paused_credits_seconds: float
    reconnects: int
    source: str
    pending_ack_timeout: float = 60.0
    """60 s (the default) from a node older than this field."""


@attrs.frozen
class ReplicationView:
    """A replicating node's side of its copy (docs/ha.md, replication)."""

    role: str
    """"live" (copying to a backup) or "backup" (copying from the live node)."""
    state: str
    """none, syncing, final (the copy's last step), in-sync."""
    peer: str
    """The backup (``node/run``) or the live node copied from ("" when none)."""
    lag_batches: int
    """Batches the backup has not acknowledged yet (live)."""
    applied_batch: int
    """The last batch applied, on the current link (backup)."""
    sync_bytes: int
    """Bytes of the current or last copy sent (live)."""
    last_sync_seconds: float | None
    """How long the last copy took until the backup was in sync (live)."""
    reason: str
    """Why a backup is not in sync ("" when it is)."""
    last_takeover: str = ""
    """"failover" or "failback": how this node last became live from a backup ("" never)."""
    last_takeover_seconds: float | None = None
    """From the link to the live node dropping to this node being LIVE."""


@attrs.frozen
class VoteView:
    """The last quorum vote a node of a pair without a lease asked (docs/ha.md, "Quorum
    vote")."""

    kind: str
    """"takeover" (a backup asks to be live) or "still-live" (a live node that lost its
    backup asks to go on alone)."""
    sequence: int
    """The activation sequence asked for."""
    won: bool
    grants: int
    needed: int
    """``quorum-size``."""
    voters: int
    reason: str
    """The tally and each refusal, or why the node did not ask."""
    seconds_ago: float
    """How long before this status the vote ended."""


@attrs.frozen
class HaStatus:
    """A node with ``[ha]``: its part and the lease as it last saw it (docs/ha.md)."""

    state: str
    policy: str
    live: str
    """The node holding the lease ("" when nobody does)."""
    epoch: int
    """The lease's epoch."""
    lease_expires_ms: int
    """When the lease ends unless renewed: epoch ms of the database's clock."""
    lease_left_ms: int
    """How long the lease had to run when last read (by the database's clock)."""
    clock_skew_ms: int
    """This node's clock minus the database's."""
    max_clock_skew_ms: int
    reason: str
    """Why the node last stopped serving ("" if it never did)."""
    backups: tuple[str, ...] = ()
    """The nodes waiting for the lease, as last seen."""
    replication: ReplicationView | None = None
    last_vote: VoteView | None = None
    """A pair without a lease: the last quorum vote this node asked (None: none yet)."""


@attrs.frozen
class DrainQueueStatus:
    """A queue a drain moves: its depth when moving began, and what is left of it."""

    name: str
    at_start: int
    left: int


@attrs.frozen
class DrainStatus:
    """A node's graceful drain (docs/ha.md, Graceful drain)."""

    state: str
    """DRAINING, DRAINED (the node stops) or FAILED."""
    target: str
    """The node the queues move to: the first of this node's failover list."""
    reason: str
    """Why it failed ("" otherwise)."""
    messages_at_start: int
    messages_left: int
    queues: tuple[DrainQueueStatus, ...] = ()


@attrs.frozen
class Status:
    """What ``GET /status`` answers (docs/management.md describes each field)."""

    node: NodeStatus
    addresses: tuple[AddressStatus, ...]
    queues: tuple[QueueStatus, ...]
    memory_bytes: int
    global_max_size: int
    paged_bytes: int
    producers_blocked: int
    bridges: tuple[BridgeStatus, ...] = ()
    """Empty from a node that has none, or that is older than bridges."""
    ha: HaStatus | None = None
    """None from a node without ``[ha]``."""
    drain: DrainStatus | None = None
    """None unless the node was asked to drain."""

    def to_json(self) -> dict[str, Any]:
        """The document as JSON types (arrays as lists)."""
        return attrs.asdict(self, value_serializer=_lists)

    @classmethod
    def from_json(cls, data: object) -> Status:
        """The status ``data`` (parsed JSON) describes, or StatusFormatError naming the
        first key that is missing or of the wrong type."""
        return _read(cls, data, "")


def _lists(_: object, __: object, value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


for _kind in (
    NodeStatus,
    AddressStatus,
    QueueStatus,
    BridgeStatus,
    ReplicationView,
    VoteView,
    HaStatus,
    DrainQueueStatus,
    DrainStatus,
    Status,
):
    attrs.resolve_types(_kind)


class StatusFormatError(ValueError):
    """A JSON document that is not a status document, with the key that says so."""


def _describe(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a value")


def _read(kind: type[_T], data: object, where: str) -> _T:
    if not isinstance(data, dict):
        raise StatusFormatError(
            f"{where or 'the document'}: expected an object, got {_describe(data)}"
        )
    values = {}
    for field in attrs.fields(kind):
        key = f"{where}.{field.name}" if where else field.name
        if field.name in data:
            values[field.name] = _value(field.type, data[field.name], key)
        elif field.default is attrs.NOTHING:
            raise StatusFormatError(f"{key}: missing")
    return kind(**values)


def _value(kind: Any, value: object, where: str) -> object:
    if get_origin(kind) is UnionType:
        if value is None and type(None) in get_args(kind):
            return None
        (kind,) = (each for each in get_args(kind) if each is not type(None))
    if attrs.has(kind):
        return _read(kind, value, where)
    if get_origin(kind) is tuple:
        if not isinstance(value, list):
            raise StatusFormatError(f"{where}: expected an array, got {_describe(value)}")
        item = get_args(kind)[0]
        return tuple(_value(item, each, f"{where}[{index}]") for index, each in enumerate(value))
    accepted = (int, float) if kind is float else kind
    if not isinstance(value, accepted) or (isinstance(value, bool) and kind is not bool):
        expected = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
        raise StatusFormatError(f"{where}: expected {expected[kind]}, got {_describe(value)}")
    return value


# -- reading it: the command line ---------------------------------------------------------


class ManagementError(Exception):
    """A failed request to the management API, described in words for one line."""


@attrs.frozen
class ManagementClient:
    """Blocking requests to one node's management API, with HTTP Basic credentials."""

    url: str
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    timeout: float = 10.0

    def get_json(self, path: str) -> object:
        """GET ``path`` and parse the answer; ManagementError on any failure."""
        return self._json("GET", path)

    def post_json(self, path: str) -> object:
        """POST (with no body) to ``path`` and parse the answer, as ``get_json``."""
        return self._json("POST", path)

    def _json(self, method: str, path: str) -> object:
        request = urllib.request.Request(
            self.url.rstrip("/") + path, headers={"Accept": "application/json"}, method=method
        )
        if self.user is not None:
            token = f"{self.user}:{self.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                body = answer.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            raise ManagementError(self._refusal(error)) from None
        except urllib.error.URLError as error:
            reason = error.reason
            text = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
            raise ManagementError(f"cannot connect: {text}") from None
        except TimeoutError:
            raise ManagementError(f"no answer within {self.timeout:g}s") from None
        except (http.client.HTTPException, OSError) as error:
            raise ManagementError(f"the connection failed: {error!r}") from None
        if len(body) > MAX_ANSWER_BYTES:
            raise ManagementError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
        try:
            return json.loads(body)
        except ValueError as error:
            raise ManagementError(f"the answer is not JSON ({error})") from None

    def _refusal(self, error: urllib.error.HTTPError) -> str:
        """The HTTP error with the node's own reason (its JSON ``error``) when it gave one."""
        try:
            reason = json.loads(error.read(64 * 1024))["error"]
        except (ValueError, TypeError, KeyError, OSError):
            reason = error.reason
        hint = " (pass --user and --password)" if error.code == 401 and self.user is None else ""
        return f"HTTP {error.code}: {reason}{hint}"


def fetch_status(client: ManagementClient) -> Status:
    data = client.get_json("/status")
    try:
        return Status.from_json(data)
    except StatusFormatError as error:
        raise ManagementError(f"the answer is not a txbridge status: {error}") from None


def format_duration(seconds: float) -> str:
    """``93784.2`` -> ``1d 2h 3m 4s``: whole seconds, leading zero units left out."""
    left = int(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if left >= size or parts:
            parts.append(f"{left // size}{unit}")
            left %= size
    parts.append(f"{left}s")
    return " ".join(parts)


def format_status(status: Status) -> str:
    """For a person: a line about the node, then the queues as an aligned table."""
    node = status.node
    connections = "1 connection" if node.connections == 1 else f"{node.connections} connections"
    lines = [
        f"node {node.name} (id {node.id}), up {format_duration(node.uptime_seconds)}, {connections}"
    ]
    drain = status.drain
    if drain is not None:
        lines.append(format_drain(drain))
    if not status.queues:
        return "\n".join([*lines, "no queues"])
    header = ("QUEUE", "ADDRESS", "DEPTH", "IN FLIGHT", "CONSUMERS")
    rows = [
        (q.name, q.address, str(q.depth), str(q.in_flight), str(q.consumers)) for q in status.queues
    ]
    return "\n".join(lines + _table(header, rows, {2, 3, 4}))


def format_drain(drain: DrainStatus) -> str:
    """One line: the drain's state, where to, what is left."""
    if drain.state == "FAILED":
        return _row("drain FAILED", drain.reason)
    return _row(
        f"{drain.state} to {drain.target or '(finding the target)'}",
        f"{drain.messages_left} of {drain.messages_at_start} message(s) left "
        f"in {len(drain.queues)} queue(s)",
    )


def _status(client: ManagementClient, args: argparse.Namespace) -> str:
    status = fetch_status(client)
    if args.json:
        return json.dumps(status.to_json(), indent=2)
    return format_status(status)


def _table(
    header: tuple[str, ...], rows: Sequence[tuple[str, ...]], numbers: set[int]
) -> list[str]:
    """Aligned lines: the ``numbers`` columns to the right, the others to the left."""
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]
    return [
        "  ".join(
            cell.rjust(width) if column in numbers else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (header, *rows)
    ]


def _row(subject: str, *figures: str, why: str | None = None) -> str:
    """One line of a view (the drain, a vote, the replication): what it is about, then its
    figures, comma-separated, then why (when the view says)."""
    line = f"{subject}: {', '.join(figures)}"
    return line if why is None else f"{line}: {why}"


def format_bridges(bridges: tuple[BridgeStatus, ...]) -> str:
    """For a person: the bridges as an aligned table."""
    if not bridges:
        return "no bridges"
    header = ("BRIDGE", "STATE", "CONNECTED TO", "FORWARDED", "PENDING", "LAST ERROR")
    rows = [
        (
            b.name,
            b.state,
            b.connected_to or "-",
            str(b.messages_forwarded),
            str(b.pending_confirmations),
            b.last_error or "-",
        )
        for b in bridges
    ]
    return "\n".join(_table(header, rows, {3, 4}))


def format_ha(ha: HaStatus) -> str:
    """For a person: the node's part, who is live, the lease and the clock skew."""
    skew = f"clock skew {ha.clock_skew_ms} ms"
    if abs(ha.clock_skew_ms) > ha.max_clock_skew_ms:
        skew += f" (above max-clock-skew {ha.max_clock_skew_ms} ms)"
    lines = [
        f"{ha.state} ({ha.policy})",
        f"live: {ha.live or 'nobody'}, epoch {ha.epoch}, lease left {ha.lease_left_ms} ms",
        skew,
        f"backups waiting: {', '.join(ha.backups) or 'none'}",
    ]
    if ha.reason:
        lines.append(f"last stopped serving: {ha.reason}")
    vote = ha.last_vote
    if vote is not None:
        lines.append(
            _row(
                f"last vote ({vote.kind}, sequence {vote.sequence}, {vote.seconds_ago:.1f} s ago)",
                "won" if vote.won else "lost",
                f"{vote.grants} of {vote.voters} granted",
                f"{vote.needed} needed",
                why=vote.reason,
            )
        )
    copy = ha.replication
    if copy is not None and copy.role == "live":
        took = (
            () if copy.last_sync_seconds is None else (f"last copy {copy.last_sync_seconds:.2f} s",)
        )
        lines.append(
            _row(
                f"replication to {copy.peer or 'no backup'}",
                copy.state,
                f"{copy.lag_batches} batches unacknowledged",
                f"{copy.sync_bytes} bytes copied",
                *took,
            )
        )
    if copy is not None and copy.last_takeover_seconds is not None:
        lines.append(
            _row(
                f"last {copy.last_takeover}",
                f"live {copy.last_takeover_seconds:.2f} s after the link to the live node dropped",
            )
        )
    elif copy is not None:
        why = f" ({copy.reason})" if copy.reason else ""
        lines.append(
            _row(
                f"replica of {copy.peer or 'no live node'}",
                f"{copy.state}{why}",
                f"batch {copy.applied_batch} applied",
            )
        )
    return "\n".join(lines)


def _ha_status(client: ManagementClient, args: argparse.Namespace) -> str:
    ha = fetch_status(client).ha
    if ha is None:
        raise ManagementError("the node has no [ha]")
    if args.json:
        return json.dumps(attrs.asdict(ha), indent=2)
    return format_ha(ha)


def _ha_failover(client: ManagementClient, _: argparse.Namespace) -> str:
    answer = client.post_json("/ha/failover")
    if answer != {"ok": True}:
        raise ManagementError(f"unexpected answer {answer!r}")
    return "failover started: the node stops serving and leaves the lease to a backup"


_DRAIN_TIMEOUT = 600.0


def _drain(client: ManagementClient, args: argparse.Namespace) -> str:
    timeout = _DRAIN_TIMEOUT if args.drain_timeout is None else args.drain_timeout
    answer = attrs.evolve(client, timeout=timeout).post_json("/node/drain")
    try:
        drain = _read(DrainStatus, answer, "")
    except StatusFormatError as error:
        raise ManagementError(f"unexpected answer {answer!r}: {error}") from None
    return (
        f"drained to {drain.target}: {drain.messages_at_start} message(s) from "
        f"{len(drain.queues)} queue(s) moved; the node stops"
    )


def _bridges_named(client: ManagementClient, name: str | None) -> tuple[BridgeStatus, ...]:
    bridges = fetch_status(client).bridges
    if name is not None:
        bridges = tuple(b for b in bridges if b.name == name)
        if not bridges:
            raise ManagementError(f"no bridge {name!r}")
    return bridges


def _bridge_status(client: ManagementClient, args: argparse.Namespace) -> str:
    bridges = _bridges_named(client, args.name)
    if args.json:
        return json.dumps([attrs.asdict(b, value_serializer=_lists) for b in bridges], indent=2)
    return format_bridges(bridges)


_DONE = {"pause": "paused", "resume": "resumed", "stop": "stopped", "start": "started"}


_SLACK = 10.0
"""Seconds a pause or stop is given beyond its bridge's ``pending-ack-timeout``."""


def _operate_bridge(client: ManagementClient, args: argparse.Namespace) -> str:
    if args.bridge_action in ("pause", "stop") and args.timeout is None:
        # A name /status does not know goes to the node all the same: its answer (HTTP 404)
        # is what every action on an unknown bridge says.
        for bridge in _bridges_named(client, None):
            if bridge.name == args.name:
                client = attrs.evolve(client, timeout=bridge.pending_ack_timeout + _SLACK)
    answer = client.post_json(f"/bridges/{quote(args.name, safe='')}/{args.bridge_action}")
    if answer != {"ok": True}:
        raise ManagementError(f"unexpected answer {answer!r}")
    return f"bridge {args.name} {_DONE[args.bridge_action]}"


def _reload(client: ManagementClient, _: argparse.Namespace) -> str:
    answer = client.post_json("/reload")
    errors = answer.get("errors") if isinstance(answer, dict) else None
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        raise ManagementError(f"unexpected answer {answer!r}")
    if errors:
        raise ManagementError("\n".join(errors))
    return "reloaded"


# -- the ctl sub-command ------------------------------------------------------------------

Action = Callable[[ManagementClient, argparse.Namespace], str]


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT, got {text!r}")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def _password(args: argparse.Namespace) -> str | None:
    """The password given, or asked on the terminal when a user was given without one."""
    given: str | None = args.password
    if args.user is None or given is not None:
        return given
    if not sys.stdin.isatty():
        raise ManagementError("--user needs --password (stdin is not a terminal to ask on)")
    return getpass.getpass(f"Password for {args.user}: ")


_DEFAULT_TIMEOUT = 10.0


def _run(args: argparse.Namespace) -> int:
    action: Action = args.ctl_action_handler
    try:
        timeout = _DEFAULT_TIMEOUT if args.timeout is None else args.timeout
        client = ManagementClient(args.url, args.user, _password(args), timeout)
        output = action(client, args)
    except ManagementError as error:
        for line in str(error).splitlines():
            print(f"txbridge ctl {args.ctl_label}: {args.url}: {line}", file=sys.stderr)
        return EXIT_FAILED
    print(output)
    return 0


def _action(actions: Any, name: str, text: str, example: str) -> argparse.ArgumentParser:
    """One action's parser: ``text`` in the list of actions and, capitalised, as its
    description, with ``example`` below its help."""
    parser: argparse.ArgumentParser = actions.add_parser(
        name,
        help=text,
        description=text[0].upper() + text[1:] + ".",
        epilog=f"example:\n  {example}",
    )
    return parser


def register(subparsers: Any) -> None:
    """Add ``txbridge ctl`` and its actions to the dispatcher's sub-commands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ctl",
        help="query and operate a running node through its management API",
        description="Query and operate a running node through its management API "
        "(the node's [management] url).",
        epilog="example:\n"
        "  txbridge ctl --url http://127.0.0.1:8161 status\n"
        "  txbridge ctl --url http://127.0.0.1:8161 --user root bridge pause a-to-b",
    )
    parser.add_argument(
        "--url", type=_url, required=True, help="the management API, http://HOST:PORT"
    )
    parser.add_argument("--user", help="user name, when the node's security is on")
    parser.add_argument(
        "--password",
        help="that user's password (visible to other local users in ps; without it, "
        "it is asked on the terminal)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        help=f"seconds to wait for an answer (default {_DEFAULT_TIMEOUT:g}; for a bridge "
        f"pause or stop, its pending-ack-timeout plus {_SLACK:g})",
    )
    actions = parser.add_subparsers(dest="ctl_action", required=True, metavar="ACTION")

    status = _action(
        actions,
        "status",
        "the node, its addresses and its queues",
        "txbridge ctl --url http://127.0.0.1:8161 status --json",
    )
    status.add_argument("--json", action="store_true", help="print the JSON document instead")
    status.set_defaults(ctl_action_handler=_status, ctl_label="status")

    bridge = _action(
        actions,
        "bridge",
        "show, pause, resume, stop or start bridges",
        "txbridge ctl --url http://127.0.0.1:8161 bridge status",
    )
    bridge_actions = bridge.add_subparsers(dest="bridge_action", required=True, metavar="ACTION")
    shown = _action(
        bridge_actions,
        "status",
        "the bridges, or one of them",
        "txbridge ctl --url http://127.0.0.1:8161 bridge status a-to-b",
    )
    shown.add_argument("name", nargs="?", metavar="NAME", help="only this bridge")
    shown.add_argument("--json", action="store_true", help="print them as JSON instead")
    shown.set_defaults(ctl_action_handler=_bridge_status, ctl_label="bridge status")
    helps = {
        "pause": "stop taking messages (keeping the connection); done once the pending "
        "ones are confirmed or back on the queue",
        "resume": "take messages again after a pause",
        "stop": "pause, then disconnect",
        "start": "start a stopped or failed bridge",
    }
    for name, text in helps.items():
        operate = _action(
            bridge_actions,
            name,
            text,
            f"txbridge ctl --url http://127.0.0.1:8161 bridge {name} a-to-b",
        )
        operate.add_argument("name", metavar="NAME", help="the bridge")
        operate.set_defaults(ctl_action_handler=_operate_bridge, ctl_label=f"bridge {name}")

    ha = _action(
        actions,
        "ha",
        "high availability: the lease and who is live",
        "txbridge ctl --url http://127.0.0.1:8161 ha status",
    )
    ha_actions = ha.add_subparsers(dest="ha_action", required=True, metavar="ACTION")
    ha_status = _action(
        ha_actions,
        "status",
        "this node's part, who is live, the epoch, the lease, the clock skew",
        "txbridge ctl --url http://127.0.0.1:8161 ha status --json",
    )
    ha_status.add_argument("--json", action="store_true", help="print the JSON instead")
    ha_status.set_defaults(ctl_action_handler=_ha_status, ctl_label="ha status")
    ha_failover = _action(
        ha_actions,
        "failover",
        "the live node stops serving, releases the lease and waits as a backup",
        "txbridge ctl --url http://127.0.0.1:8161 --user root ha failover",
    )
    ha_failover.set_defaults(ctl_action_handler=_ha_failover, ctl_label="ha failover")

    node = _action(
        actions,
        "node",
        "the node as a whole: drain it",
        "txbridge ctl --url http://127.0.0.1:8161 node drain",
    )
    node_actions = node.add_subparsers(dest="node_action", required=True, metavar="ACTION")
    drain = _action(
        node_actions,
        "drain",
        "stop accepting, send the clients on, move every queue's messages to the first "
        "node of this node's failover list, then stop the node",
        "txbridge ctl --url http://127.0.0.1:8161 node drain --timeout 300",
    )
    drain.add_argument(
        "--timeout",
        dest="drain_timeout",
        type=_seconds,
        help=f"seconds to wait for the drain to end (default {_DRAIN_TIMEOUT:g}); the node "
        "goes on draining after it",
    )
    drain.set_defaults(ctl_action_handler=_drain, ctl_label="node drain")

    reload = _action(
        actions,
        "reload",
        "read the bridge files again; print the errors of bad ones",
        "txbridge ctl --url http://127.0.0.1:8161 reload",
    )
    reload.set_defaults(ctl_action_handler=_reload, ctl_label="reload")

    parser.set_defaults(handler=_run)
