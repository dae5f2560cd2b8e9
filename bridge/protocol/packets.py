"""The core protocol's packets, as plain immutable events (h11-style).

Each packet is a frozen attrs class; ``codec.py`` turns it into a frame type and payload and
back. A packet class knows its frame type (``TYPE``) but nothing of bytes, sockets or
sessions: the node's and the client's protocol state machines consume and produce these
events, and the Twisted protocols only move frames. docs/protocol.md is the reference for
what each packet means and how it is encoded.

Integer fields hold unsigned 64-bit values unless their docstring says otherwise; the
codec refuses a value that does not fit its wire width rather than truncating it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

import attrs

from bridge.message import Message

PROTOCOL_VERSION = 5
"""The core protocol version this codec speaks (CONNECT/CONNECTED ``protocol_version``)."""

SUPPORTED_VERSIONS = frozenset({2, 3, 4, PROTOCOL_VERSION})
"""The versions a node accepts in a CONNECT: version 2 lacks ``Routing.BOTH`` and what
later versions add, version 3 the cluster's packets (TOPOLOGY, REDIRECT, CLUSTER_CONNECT,
NODE_ANNOUNCE) and what version 5 adds, version 4 REATTACH_CONSUMER and REATTACHED."""

TOPOLOGY_VERSION = 4
"""The first version whose clients may send CLUSTER_CONNECT (and get TOPOLOGY)."""

REATTACH_VERSION = 5
"""The first version whose clients may send REATTACH_CONSUMER (and get REATTACHED)."""

CLAIM_LIMIT = 8192
"""The most message ids one REATTACH_CONSUMER may claim; more is a protocol error that
ends the connection. A client holding more claims its oldest this many."""

FRAME_SIZE_UNSTATED = 4 * 1024 * 1024
"""The ``max_frame_size`` a CONNECT or CONNECTED built without one states: the
transport's default (``transport.frames.DEFAULT_MAX_FRAME_SIZE``)."""

BATCH_BYTES = 64 * 1024
"""The most bytes of messages (each with its u32 length) a sender puts in one SEND_MANY or
DELIVER_MANY, less if its peer reads smaller frames: enough to spare most of the per-frame
work, small enough not to hold a turn's first message back behind a long batch."""

LARGE_CHUNK_SIZE = 1024 * 1024
"""The most body bytes a sender puts in one SEND_LARGE_CHUNK or DELIVER_LARGE_CHUNK, less
if its peer reads smaller frames (``large_chunk_size``): each chunk costs both ends a
frame, a file read or write and a reactor turn, so a 10 MiB body goes in ten, not forty."""

LARGE_CHUNK_OVERHEAD = 17
"""SEND_LARGE_CHUNK's and DELIVER_LARGE_CHUNK's bytes besides their data, at most."""


def large_chunk_size(max_frame_size: int) -> int:
    """Body bytes per large chunk to a peer that reads frames of ``max_frame_size``."""
    return max(1, min(LARGE_CHUNK_SIZE, max_frame_size - LARGE_CHUNK_OVERHEAD))


SEND_MANY_OVERHEAD = 21
"""SEND_MANY's bytes besides its messages, at most: sequence, transaction, count."""

DELIVER_MANY_OVERHEAD = 20
"""DELIVER_MANY's bytes besides its messages: consumer, first delivery id, count, count."""

UNLIMITED = -1
"""A window size meaning "no flow control" (CREATE_CONSUMER, CONNECTED)."""


class PacketType(IntEnum):
    """Frame types of the core protocol, grouped by area in blocks of 16.

    These numbers are the wire format: never renumber one, only add. Types below 16 belong
    to the transport (``transport.frames.ControlType``).
    """

    # Connection (16-31)
    CONNECT = 16
    CONNECTED = 17
    # Replies to requests (32-47)
    OK = 32
    FAILED = 33
    # Queues (48-63)
    CREATE_QUEUE = 48
    DELETE_QUEUE = 49
    # Producing (64-79)
    SEND = 64
    SEND_CONFIRMED = 65
    SEND_FAILED = 66
    PRODUCER_CREDITS = 67
    SEND_LARGE_BEGIN = 68
    SEND_LARGE_CHUNK = 69
    SEND_MANY = 70
    # Consuming (80-95)
    CREATE_CONSUMER = 80
    CLOSE_CONSUMER = 81
    DELIVER = 82
    CONSUMER_CREDITS = 83
    ACK = 84
    NACK = 85
    DELIVER_LARGE_BEGIN = 86
    DELIVER_LARGE_CHUNK = 87
    DELIVER_MANY = 88
    # Transactions (96-111)
    TX_BEGIN = 96
    TX_COMMIT = 97
    TX_ROLLBACK = 98
    # Addresses (112-127)
    QUERY_ADDRESS = 112
    ADDRESS_INFO = 113

    REPLICA_ANNOUNCE = 128
    REPLICA_SYNC_BEGIN = 129
    REPLICA_SYNC_FILE = 130
    REPLICA_BODY = 131
    REPLICA_SYNC_END = 132
    REPLICA_SYNCED = 133
    REPLICA_BATCH = 134
    REPLICA_ACK = 135
    REPLICA_DISCARD = 136
    VOTE_REQUEST = 137
    VOTE_REPLY = 138
    # Cluster (140-149)
    TOPOLOGY = 140
    REDIRECT = 141
    CLUSTER_CONNECT = 142
    NODE_ANNOUNCE = 143
    # Reattaching consumers after a reconnection (144-...)
    REATTACH_CONSUMER = 144
    REATTACHED = 145


PACKET_TYPES: frozenset[int] = frozenset(PacketType)
"""Every frame type of the core protocol: the transport decoder's ``accepted_types``."""


class ErrorCode(IntEnum):
    """Why a request (FAILED) or a send (SEND_FAILED) failed. Wire values are stable."""

    AUTHENTICATION = 1
    """The CONNECT credentials or certificate were refused."""
    PERMISSION_DENIED = 2
    """The user lacks the permission for this operation on this address or queue."""
    NOT_FOUND = 3
    """The named queue, address, consumer or transaction does not exist."""
    ALREADY_EXISTS = 4
    """A queue, consumer id or transaction id of that name or number is in use."""
    INVALID = 5
    """The request is well-formed but makes no sense (a bad filter, a wrong total size)."""
    ADDRESS_FULL = 6
    """The address is full and its address-full policy is FAIL."""
    UNSUPPORTED_VERSION = 7
    """The node does not speak the CONNECT's protocol version."""
    INTERNAL = 8
    """The node failed (the store could not write, say); the request may be retried."""


class Routing(IntEnum):
    """How an address routes to its queues (Artemis's routing types)."""

    ANYCAST = 1
    """Each message goes to one queue: the queue of the address's name."""
    MULTICAST = 2
    """Each message goes to every queue (subscription) of the address."""
    BOTH = 3
    """ADDRESS_INFO only, protocol 3: the address has anycast and multicast queues, and a
    send goes to those its ``_TXB_ROUTING_TYPE`` header names (anycast if none)."""


class AddressFullPolicy(IntEnum):
    """What a full address does with the next send (Artemis's address-full policies)."""

    PAGE = 1
    """Keep it in the store, not in memory."""
    BLOCK = 2
    """Withhold producer credits until there is room."""
    FAIL = 3
    """Refuse it (SEND_FAILED, ADDRESS_FULL)."""
    DROP = 4
    """Confirm it and drop it."""


# Connection


@attrs.frozen
class Connect:
    """client -> node, the first packet of a connection: who the client is.

    ``confirmation_window_size`` is the client's, in bytes (u32): how many bytes of sends
    it may have unconfirmed before it stops sending. ``max_frame_size`` (u32) is the
    largest payload the client reads: the node's DELIVER_MANY frames stay within it.
    """

    TYPE: ClassVar[PacketType] = PacketType.CONNECT

    protocol_version: int
    client_id: str
    user: str | None
    password: str | None
    confirmation_window_size: int
    max_frame_size: int = FRAME_SIZE_UNSTATED


@attrs.frozen
class Connected:
    """node -> client: the connection is accepted (a refusal is FAILED, request id 0).

    ``producer_window_size`` (i32 bytes) is the producer credit every address starts with
    on this connection; -1 (``UNLIMITED``) means producers are not flow-controlled.
    ``max_frame_size`` (u32) is the largest payload the node reads: the client's SEND_MANY
    frames stay within it.
    """

    TYPE: ClassVar[PacketType] = PacketType.CONNECTED

    node_name: str
    node_id: str
    protocol_version: int
    producer_window_size: int
    max_frame_size: int = FRAME_SIZE_UNSTATED


# Replies


@attrs.frozen
class Ok:
    """node -> client: the request ``request_id`` succeeded (and is durable if it writes)."""

    TYPE: ClassVar[PacketType] = PacketType.OK

    request_id: int


@attrs.frozen
class Failed:
    """node -> client: the request ``request_id`` failed, why (``code``) and in words."""

    TYPE: ClassVar[PacketType] = PacketType.FAILED

    request_id: int
    code: ErrorCode
    message: str


# Queues


@attrs.frozen
class CreateQueue:
    """client -> node: create queue ``name`` bound to ``address``; answered OK/FAILED."""

    TYPE: ClassVar[PacketType] = PacketType.CREATE_QUEUE

    request_id: int
    name: str
    address: str
    routing: Routing
    durable: bool
    filter: str | None


@attrs.frozen
class DeleteQueue:
    """client -> node: delete queue ``name`` and its messages; answered OK/FAILED."""

    TYPE: ClassVar[PacketType] = PacketType.DELETE_QUEUE

    request_id: int
    name: str


# Producing


@attrs.frozen
class Send:
    """client -> node: route ``message`` to its address (hot path).

    ``sequence`` increases per connection; the node confirms ranges of sequences with
    SEND_CONFIRMED or reports one with SEND_FAILED. ``tx_id`` joins a transaction. The
    message's id is ignored: the node assigns its own.
    """

    TYPE: ClassVar[PacketType] = PacketType.SEND

    sequence: int
    tx_id: int | None
    message: Message


@attrs.frozen
class SendMany:
    """client -> node: consecutive sends in one frame (hot path): ``messages[i]`` is the
    SEND of sequence ``first_sequence + i``, each confirmed, refused and routed as if it
    had come alone, in order. One frame instead of many spares each side the cost of a
    frame and a packet per message. At least one message."""

    TYPE: ClassVar[PacketType] = PacketType.SEND_MANY

    first_sequence: int
    tx_id: int | None
    messages: tuple[Message, ...]


@attrs.frozen
class SendConfirmed:
    """node -> client: every send with sequence <= ``up_to_sequence`` that was not
    reported by SEND_FAILED is durable (routed, if not durable). Hot path."""

    TYPE: ClassVar[PacketType] = PacketType.SEND_CONFIRMED

    up_to_sequence: int


@attrs.frozen
class SendFailed:
    """node -> client: the send ``sequence`` was not accepted, why and in words."""

    TYPE: ClassVar[PacketType] = PacketType.SEND_FAILED

    sequence: int
    code: ErrorCode
    message: str


@attrs.frozen
class ProducerCredits:
    """node -> client: ``credits`` (u32) more bytes may be sent to ``address``."""

    TYPE: ClassVar[PacketType] = PacketType.PRODUCER_CREDITS

    address: str
    credits: int


@attrs.frozen
class SendLargeBegin:
    """client -> node: a large send starts; ``message`` has the headers and an empty body,
    whose ``total_size`` bytes follow in SEND_LARGE_CHUNKs of the same ``sequence``."""

    TYPE: ClassVar[PacketType] = PacketType.SEND_LARGE_BEGIN

    sequence: int
    tx_id: int | None
    message: Message
    total_size: int


@attrs.frozen
class SendLargeChunk:
    """client -> node: the next ``data`` of the large send ``sequence``; ``last`` ends it."""

    TYPE: ClassVar[PacketType] = PacketType.SEND_LARGE_CHUNK

    sequence: int
    data: bytes | memoryview
    """Decoded: a view of the frame's payload (``codec.CHUNK``), to write out, not keep."""
    last: bool


# Consuming


@attrs.frozen
class CreateConsumer:
    """client -> node: consume from ``queue``; answered OK/FAILED.

    ``consumer_id`` (u32) is the client's choice, unique among its open consumers.
    ``window_size`` (i32 bytes) is the initial credit: -1 (``UNLIMITED``) for no flow
    control, 0 for no deliveries until CONSUMER_CREDITS.
    """

    TYPE: ClassVar[PacketType] = PacketType.CREATE_CONSUMER

    request_id: int
    consumer_id: int
    queue: str
    filter: str | None
    browse_only: bool
    window_size: int


@attrs.frozen
class CloseConsumer:
    """client -> node: stop consumer ``consumer_id`` (u32); its unacknowledged deliveries
    go back to the queue. Answered OK/FAILED; no DELIVER for it follows the OK."""

    TYPE: ClassVar[PacketType] = PacketType.CLOSE_CONSUMER

    request_id: int
    consumer_id: int


@attrs.frozen
class Deliver:
    """node -> client: ``message`` (with its node-assigned id) for consumer ``consumer_id``
    (u32). ``delivery_id`` increases per consumer; ``delivery_count`` (u32) is 1 on the
    first delivery and counts redeliveries. Hot path."""

    TYPE: ClassVar[PacketType] = PacketType.DELIVER

    consumer_id: int
    delivery_id: int
    delivery_count: int
    message: Message


@attrs.frozen
class DeliverMany:
    """node -> client: consecutive deliveries to consumer ``consumer_id`` in one frame (hot
    path): ``messages[i]`` is the DELIVER of delivery id ``first_delivery_id + i``, all
    with ``delivery_count``. At least one message."""

    TYPE: ClassVar[PacketType] = PacketType.DELIVER_MANY

    consumer_id: int
    first_delivery_id: int
    delivery_count: int
    messages: tuple[Message, ...]


@attrs.frozen
class ConsumerCredits:
    """client -> node: consumer ``consumer_id`` (u32) may receive ``credits`` (u32) more
    bytes. Hot path."""

    TYPE: ClassVar[PacketType] = PacketType.CONSUMER_CREDITS

    consumer_id: int
    credits: int


@attrs.frozen
class Ack:
    """client -> node: acknowledge ``delivery_id`` of consumer ``consumer_id`` (u32), or with
    ``cumulative`` every delivery of that consumer up to it. Hot path.

    ``tx_id`` makes the acknowledgement part of a transaction; with ``request_id`` the node
    answers OK/FAILED once the acknowledgement is durable.
    """

    TYPE: ClassVar[PacketType] = PacketType.ACK

    consumer_id: int
    delivery_id: int
    cumulative: bool
    tx_id: int | None
    request_id: int | None


@attrs.frozen
class Nack:
    """client -> node: refuse ``delivery_id`` of consumer ``consumer_id`` (u32): back on the
    queue for redelivery with ``requeue``, otherwise dropped."""

    TYPE: ClassVar[PacketType] = PacketType.NACK

    consumer_id: int
    delivery_id: int
    requeue: bool


@attrs.frozen
class DeliverLargeBegin:
    """node -> client: a large delivery starts, as DELIVER but with an empty body whose
    ``total_size`` bytes follow in DELIVER_LARGE_CHUNKs of the same consumer and delivery."""

    TYPE: ClassVar[PacketType] = PacketType.DELIVER_LARGE_BEGIN

    consumer_id: int
    delivery_id: int
    delivery_count: int
    message: Message
    total_size: int


@attrs.frozen
class DeliverLargeChunk:
    """node -> client: the next ``data`` of a large delivery; ``last`` ends it."""

    TYPE: ClassVar[PacketType] = PacketType.DELIVER_LARGE_CHUNK

    consumer_id: int
    delivery_id: int
    data: bytes | memoryview
    """Decoded: a view of the frame's payload (``codec.CHUNK``), to write out, not keep."""
    last: bool


# Transactions


@attrs.frozen
class TxBegin:
    """client -> node: open transaction ``tx_id`` (the client's choice); answered OK/FAILED."""

    TYPE: ClassVar[PacketType] = PacketType.TX_BEGIN

    request_id: int
    tx_id: int


@attrs.frozen
class TxCommit:
    """client -> node: make the transaction's sends and acks effective at once; OK when
    durable."""

    TYPE: ClassVar[PacketType] = PacketType.TX_COMMIT

    request_id: int
    tx_id: int


@attrs.frozen
class TxRollback:
    """client -> node: discard the transaction's sends; its acknowledged messages are
    redelivered. Answered OK/FAILED."""

    TYPE: ClassVar[PacketType] = PacketType.TX_ROLLBACK

    request_id: int
    tx_id: int


# Addresses


@attrs.frozen
class QueryAddress:
    """client -> node: how is ``address`` set up? Answered ADDRESS_INFO (or FAILED)."""

    TYPE: ClassVar[PacketType] = PacketType.QUERY_ADDRESS

    request_id: int
    address: str


@attrs.frozen
class AddressInfo:
    """node -> client: the answer to QUERY_ADDRESS ``request_id``.

    For an address that does not exist (``exists`` false), the settings it would get if
    created on first use, which it is when ``auto_create``; ``routing`` is None when it
    neither exists nor would be created. ``max_size_bytes`` is an i64 (-1: unlimited).
    """

    TYPE: ClassVar[PacketType] = PacketType.ADDRESS_INFO

    request_id: int
    exists: bool
    auto_create: bool
    routing: Routing | None
    max_size_bytes: int
    address_full_policy: AddressFullPolicy
    id_cache_size: int


# Replication: a backup node and its live node (docs/ha.md), once the backup logged in
# as the cluster user. The live node sends its store's rows and large bodies, then every
# batch it writes; the backup acknowledges each batch once it is on its disk.


@attrs.frozen
class ReplicaAnnounce:
    """backup -> live: replicate your store to me. ``holder`` is the backup's ``node/run``,
    ``schema_version`` its store's (u16): a backup copies only its own version.
    ``failback``: once in sync, the backup is to be live again (it is the pair's primary,
    with ``allow-failback``). ``sequence`` (u64): the activation sequence the backup's
    store carries; a live node whose own is older stops serving (docs/ha.md, quorum vote)."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_ANNOUNCE

    node_name: str
    holder: str
    schema_version: int
    failback: bool = False
    sequence: int = 0


@attrs.frozen
class ReplicaSyncBegin:
    """live -> backup: the copy starts; start your store over. ``epoch`` (u64) is the
    live node's, which the backup keeps to refuse an older live node's batches later."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_SYNC_BEGIN

    node_name: str
    epoch: int
    schema_version: int


@attrs.frozen
class ReplicaSyncFile:
    """live -> backup: the next chunk of the snapshot's database file
    (``bridge.store.snapshot``), in order."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_SYNC_FILE

    data: bytes


@attrs.frozen
class ReplicaBody:
    """live -> backup: the next chunk of a large body; ``last`` ends it."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_BODY

    message_id: int
    data: bytes | memoryview
    """Decoded: a view of the frame's payload (``codec.CHUNK``), to write out, not keep."""
    last: bool


@attrs.frozen
class ReplicaSyncEnd:
    """live -> backup: the copy is complete up to batch ``sequence`` (u64): sync your
    store and answer REPLICA_SYNCED."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_SYNC_END

    sequence: int


@attrs.frozen
class ReplicaSynced:
    """backup -> live: everything up to batch ``sequence`` is on this node's disk."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_SYNCED

    sequence: int


@attrs.frozen
class ReplicaBatch:
    """live -> backup: batch ``sequence`` (u64, from 1) of store operations, encoded by
    ``bridge.store.op_codec``; their large bodies came before it (REPLICA_BODY)."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_BATCH

    sequence: int
    operations: bytes


@attrs.frozen
class ReplicaAck:
    """backup -> live: batches up to ``sequence`` are applied and on this node's disk."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_ACK

    sequence: int


@attrs.frozen
class ReplicaDiscard:
    """live -> backup: the live node deleted this large message's body (its message is
    gone, by a batch sent before): delete the copy's."""

    TYPE: ClassVar[PacketType] = PacketType.REPLICA_DISCARD

    message_id: int


# The quorum vote of a replication pair without a lease (docs/ha.md, "Quorum vote"), asked
# by the cluster user of any node with a core acceptor.


@attrs.frozen
class VoteRequest:
    """node -> voter: a backup asks whether the live node at ``about`` (a core URL) is gone,
    and to take activation sequence ``sequence`` (u64) if so; a live node that lost its
    backup (``about`` "") asks to go on alone as ``sequence`` (its own plus one). ``node_name`` and
    ``holder`` (``node/run``) name who asks; ``timeout_ms`` (u32) bounds the voter's own
    try to reach ``about``."""

    TYPE: ClassVar[PacketType] = PacketType.VOTE_REQUEST

    node_name: str
    holder: str
    about: str
    sequence: int
    timeout_ms: int


@attrs.frozen
class VoteReply:
    """voter -> node: the vote (``granted``), why in words, and the highest activation
    sequence the voter has granted or seen (``seen``, u64)."""

    TYPE: ClassVar[PacketType] = PacketType.VOTE_REPLY

    granted: bool
    reason: str
    seen: int


# Cluster: the members a node knows, pushed to its clients (protocol 4), and where a
# client that lost its node finds the store it was on (docs/ha.md, "Clients that follow
# the failover map").


@attrs.frozen
class TopologyMember:
    """One member in a TOPOLOGY: its node id, host id, the URLs clients reach it at, the
    stores (node names) it serves now, and its failover list, first choice first."""

    node_id: str
    host_id: str
    urls: tuple[str, ...]
    serves: tuple[str, ...]
    failover: tuple[str, ...]


@attrs.frozen
class Topology:
    """node -> client, after the CONNECTED answering a CLUSTER_CONNECT and at every change
    of the node's view: the members in view order with the failover map."""

    TYPE: ClassVar[PacketType] = PacketType.TOPOLOGY

    members: tuple[TopologyMember, ...]


@attrs.frozen
class Redirect:
    """node -> client, instead of CONNECTED to a CLUSTER_CONNECT for a store this node does not
    serve: ``store`` is served at ``urls`` (none: no member serves it now, try again).
    The node closes the connection after it."""

    TYPE: ClassVar[PacketType] = PacketType.REDIRECT

    store: str
    urls: tuple[str, ...]


@attrs.frozen
class ClusterConnect:
    """client -> node, instead of CONNECT (protocol 4): CONNECT's fields, and the
    ``store`` the client's sessions were on (the name of the node it last reached; ""
    for none yet). A node that does not serve that store redirects the client to the one
    that does (REDIRECT); a session opened so gets the node's TOPOLOGY."""

    TYPE: ClassVar[PacketType] = PacketType.CLUSTER_CONNECT

    protocol_version: int
    client_id: str
    user: str | None
    password: str | None
    confirmation_window_size: int
    max_frame_size: int
    store: str


@attrs.frozen
class NodeAnnounce:
    """member -> member, once logged in as the cluster user: this node, live, serving
    ``serves``. Answered by TOPOLOGY; the receiver knows the member while the connection
    lasts."""

    TYPE: ClassVar[PacketType] = PacketType.NODE_ANNOUNCE

    node_id: str
    host_id: str
    urls: tuple[str, ...]
    serves: tuple[str, ...]


# Reattaching a consumer (protocol 5): the messages a client still holds from its
# earlier connection become deliveries of the consumer it creates again (docs/ha.md,
# "Deliveries held across a reconnection").


@attrs.frozen
class ReattachConsumer:
    """client -> node, instead of CREATE_CONSUMER when the client creates a consumer again
    after a reconnection: CREATE_CONSUMER's fields, and ``claim``, the ids (u64) of the
    messages of ``queue`` it still holds unsettled from its earlier connection, at most
    ``CLAIM_LIMIT``. The node claims those waiting on the queue before it delivers
    anything to the consumer; answered REATTACHED (or FAILED, as CREATE_CONSUMER)."""

    TYPE: ClassVar[PacketType] = PacketType.REATTACH_CONSUMER

    request_id: int
    consumer_id: int
    queue: str
    filter: str | None
    browse_only: bool
    window_size: int
    claim: tuple[int, ...]


@attrs.frozen
class ClaimedDelivery:
    """One claimed message of a REATTACHED: its id and its delivery id on the new
    connection (both u64)."""

    message_id: int
    delivery_id: int


@attrs.frozen
class Reattached:
    """node -> client: the consumer of REATTACH_CONSUMER ``request_id`` is created. The
    ``claimed`` messages are its deliveries now, in flight to it, their delivery count
    unchanged (the application saw them once); the ``unclaimed`` ids were not waiting on
    the queue (acknowledged, dead-lettered, delivered to another consumer, or paged out): the
    client's copies are stale and the node delivers those still on the queue again."""

    TYPE: ClassVar[PacketType] = PacketType.REATTACHED

    request_id: int
    claimed: tuple[ClaimedDelivery, ...]
    unclaimed: tuple[int, ...]


Packet = (
    Connect
    | Connected
    | Ok
    | Failed
    | CreateQueue
    | DeleteQueue
    | Send
    | SendConfirmed
    | SendFailed
    | ProducerCredits
    | SendLargeBegin
    | SendLargeChunk
    | SendMany
    | CreateConsumer
    | CloseConsumer
    | Deliver
    | ConsumerCredits
    | Ack
    | Nack
    | DeliverLargeBegin
    | DeliverLargeChunk
    | DeliverMany
    | TxBegin
    | TxCommit
    | TxRollback
    | QueryAddress
    | AddressInfo
    | ReplicaAnnounce
    | ReplicaSyncBegin
    | ReplicaSyncFile
    | ReplicaBody
    | ReplicaSyncEnd
    | ReplicaSynced
    | ReplicaBatch
    | ReplicaAck
    | ReplicaDiscard
    | VoteRequest
    | VoteReply
    | Topology
    | Redirect
    | ClusterConnect
    | NodeAnnounce
    | ReattachConsumer
    | Reattached
)
"""Any core protocol packet."""

PACKET_CLASSES: tuple[type[Packet], ...] = (
    Connect,
    Connected,
    Ok,
    Failed,
    CreateQueue,
    DeleteQueue,
    Send,
    SendConfirmed,
    SendFailed,
    ProducerCredits,
    SendLargeBegin,
    SendLargeChunk,
    SendMany,
    CreateConsumer,
    CloseConsumer,
    Deliver,
    ConsumerCredits,
    Ack,
    Nack,
    DeliverLargeBegin,
    DeliverLargeChunk,
    DeliverMany,
    TxBegin,
    TxCommit,
    TxRollback,
    QueryAddress,
    AddressInfo,
    ReplicaAnnounce,
    ReplicaSyncBegin,
    ReplicaSyncFile,
    ReplicaBody,
    ReplicaSyncEnd,
    ReplicaSynced,
    ReplicaBatch,
    ReplicaAck,
    ReplicaDiscard,
    VoteRequest,
    VoteReply,
    Topology,
    Redirect,
    ClusterConnect,
    NodeAnnounce,
    ReattachConsumer,
    Reattached,
)
"""Every packet class, in frame-type order."""
