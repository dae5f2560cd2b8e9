"""Property tests of the packet codec: every packet round trips, and any payload, random or
mutated, decodes to a packet that encodes back to the same bytes or raises only
PacketFormatError. The hot-path codecs agree with the generic ones on every input."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.message import Message, encode_message
from bridge.protocol import (
    PACKET_CLASSES,
    PACKET_TYPES,
    Ack,
    AddressFullPolicy,
    AddressInfo,
    CloseConsumer,
    Connect,
    Connected,
    ConsumerCredits,
    CreateConsumer,
    CreateQueue,
    DeleteQueue,
    Deliver,
    DeliverLargeBegin,
    DeliverLargeChunk,
    DeliverMany,
    ErrorCode,
    Failed,
    Nack,
    Ok,
    Packet,
    PacketFormatError,
    PacketType,
    ProducerCredits,
    QueryAddress,
    Routing,
    Send,
    SendConfirmed,
    SendFailed,
    SendLargeBegin,
    SendLargeChunk,
    SendMany,
    TxBegin,
    TxCommit,
    TxRollback,
    decode_packet,
    encode_packet,
)
from bridge.protocol.codec import LAYOUTS, encode_sends
from bridge.protocol.packets import (
    ClaimedDelivery,
    ClusterConnect,
    NodeAnnounce,
    ReattachConsumer,
    Reattached,
    Redirect,
    ReplicaAck,
    ReplicaAnnounce,
    ReplicaBatch,
    ReplicaBody,
    ReplicaDiscard,
    ReplicaSyncBegin,
    ReplicaSynced,
    ReplicaSyncEnd,
    ReplicaSyncFile,
    Topology,
    TopologyMember,
    VoteReply,
    VoteRequest,
)

U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
U64 = st.integers(0, 0xFFFF_FFFF_FFFF_FFFF)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
WINDOW = st.integers(-1, 0x7FFF_FFFF)
SIZES = st.integers(-1, (1 << 63) - 1)
NAMES = st.text(max_size=30)
TEXTS = st.text(max_size=200)
DATA = st.binary(max_size=500)
CODES = st.sampled_from(ErrorCode)
NAME_LISTS = st.lists(NAMES, max_size=4).map(tuple)


def message_strategy(body: st.SearchStrategy[bytes]) -> st.SearchStrategy[Message]:
    """Messages with every kind of header value; ``body`` decides the body."""
    values = st.one_of(st.text(), I64, st.floats(allow_nan=False), st.booleans(), st.binary())
    return st.builds(
        Message,
        id=I64,
        address=NAMES,
        durable=st.booleans(),
        headers=st.dictionaries(st.text(max_size=20), values, max_size=6),
        body=body,
        duplicate_id=st.none() | st.binary(max_size=40),
        timestamp_ns=I64,
    )


MESSAGES = message_strategy(DATA)
HEADERS_ONLY = message_strategy(st.just(b""))
BATCHES = st.lists(message_strategy(st.binary(max_size=100)), min_size=1, max_size=4).map(tuple)

STRATEGIES: dict[type[Packet], st.SearchStrategy[Any]] = {
    Connect: st.builds(Connect, U16, NAMES, st.none() | NAMES, st.none() | NAMES, U32, U32),
    Connected: st.builds(Connected, NAMES, NAMES, U16, WINDOW, U32),
    Ok: st.builds(Ok, U64),
    Failed: st.builds(Failed, U64, CODES, TEXTS),
    CreateQueue: st.builds(
        CreateQueue,
        U64,
        NAMES,
        NAMES,
        st.sampled_from([Routing.ANYCAST, Routing.MULTICAST]),
        st.booleans(),
        st.none() | TEXTS,
    ),
    DeleteQueue: st.builds(DeleteQueue, U64, NAMES),
    Send: st.builds(Send, U64, st.none() | U64, MESSAGES),
    SendConfirmed: st.builds(SendConfirmed, U64),
    SendFailed: st.builds(SendFailed, U64, CODES, TEXTS),
    ProducerCredits: st.builds(ProducerCredits, NAMES, U32),
    SendLargeBegin: st.builds(SendLargeBegin, U64, st.none() | U64, HEADERS_ONLY, U64),
    SendLargeChunk: st.builds(SendLargeChunk, U64, DATA, st.booleans()),
    SendMany: st.builds(SendMany, U64, st.none() | U64, BATCHES),
    CreateConsumer: st.builds(
        CreateConsumer, U64, U32, NAMES, st.none() | TEXTS, st.booleans(), WINDOW
    ),
    CloseConsumer: st.builds(CloseConsumer, U64, U32),
    Deliver: st.builds(Deliver, U32, U64, U32, MESSAGES),
    ConsumerCredits: st.builds(ConsumerCredits, U32, U32),
    Ack: st.builds(Ack, U32, U64, st.booleans(), st.none() | U64, st.none() | U64),
    Nack: st.builds(Nack, U32, U64, st.booleans()),
    DeliverLargeBegin: st.builds(DeliverLargeBegin, U32, U64, U32, HEADERS_ONLY, U64),
    DeliverLargeChunk: st.builds(DeliverLargeChunk, U32, U64, DATA, st.booleans()),
    DeliverMany: st.builds(DeliverMany, U32, U64, U32, BATCHES),
    TxBegin: st.builds(TxBegin, U64, U64),
    TxCommit: st.builds(TxCommit, U64, U64),
    TxRollback: st.builds(TxRollback, U64, U64),
    QueryAddress: st.builds(QueryAddress, U64, NAMES),
    AddressInfo: st.builds(
        AddressInfo,
        U64,
        st.booleans(),
        st.booleans(),
        st.none() | st.sampled_from(Routing),
        SIZES,
        st.sampled_from(AddressFullPolicy),
        U64,
    ),
    ReplicaAnnounce: st.builds(ReplicaAnnounce, NAMES, NAMES, U16, st.booleans(), U64),
    ReplicaSyncBegin: st.builds(ReplicaSyncBegin, NAMES, U64, U16),
    ReplicaSyncFile: st.builds(ReplicaSyncFile, DATA),
    ReplicaBody: st.builds(ReplicaBody, U64, DATA, st.booleans()),
    ReplicaSyncEnd: st.builds(ReplicaSyncEnd, U64),
    ReplicaSynced: st.builds(ReplicaSynced, U64),
    ReplicaBatch: st.builds(ReplicaBatch, U64, DATA),
    ReplicaAck: st.builds(ReplicaAck, U64),
    ReplicaDiscard: st.builds(ReplicaDiscard, U64),
    VoteRequest: st.builds(VoteRequest, NAMES, NAMES, NAMES, U64, U32),
    VoteReply: st.builds(VoteReply, st.booleans(), TEXTS, U64),
    Topology: st.builds(
        Topology,
        st.lists(
            st.builds(TopologyMember, NAMES, NAMES, NAME_LISTS, NAME_LISTS, NAME_LISTS),
            max_size=4,
        ).map(tuple),
    ),
    Redirect: st.builds(Redirect, NAMES, NAME_LISTS),
    ClusterConnect: st.builds(
        ClusterConnect, U16, NAMES, st.none() | NAMES, st.none() | NAMES, U32, U32, NAMES
    ),
    NodeAnnounce: st.builds(NodeAnnounce, NAMES, NAMES, NAME_LISTS, NAME_LISTS),
    ReattachConsumer: st.builds(
        ReattachConsumer,
        U64,
        U32,
        NAMES,
        st.none() | TEXTS,
        st.booleans(),
        WINDOW,
        st.lists(U64, max_size=20).map(tuple),
    ),
    Reattached: st.builds(
        Reattached,
        U64,
        st.lists(st.builds(ClaimedDelivery, U64, U64), max_size=10).map(tuple),
        st.lists(U64, max_size=10).map(tuple),
    ),
}
PACKETS = st.one_of(*STRATEGIES.values())
HOT_PATH = (Send, SendConfirmed, Deliver, ConsumerCredits, Ack)
FUZZ_EXAMPLES = 1000  # the fuzz tests try harder than the default 100


def test_every_packet_class_has_a_strategy_a_layout_and_its_own_frame_type():
    assert set(STRATEGIES) == set(PACKET_CLASSES) == set(LAYOUTS)
    assert {cls.TYPE for cls in PACKET_CLASSES} == set(PacketType) == PACKET_TYPES
    assert len(PACKET_CLASSES) == len(PacketType)
    assert all(16 <= frame_type <= 255 for frame_type in PACKET_TYPES)


@pytest.mark.parametrize("cls", PACKET_CLASSES, ids=lambda cls: cls.__name__)
def test_each_layout_lists_the_class_fields_in_declaration_order(cls):
    assert [name for name, _ in LAYOUTS[cls].fields] == [f.name for f in attrs.fields(cls)]


@given(PACKETS)
def test_packets_are_frozen_slotted_attrs_classes(packet):
    cls = type(packet)
    assert attrs.has(cls)
    assert "__slots__" in cls.__dict__
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(packet, attrs.fields(cls)[0].name, None)


@given(PACKETS)
def test_every_packet_round_trips(packet):
    frame_type, payload = encode_packet(packet)
    assert frame_type == packet.TYPE
    assert type(payload) is bytes
    decoded = decode_packet(frame_type, payload)
    assert decoded == packet
    assert type(decoded) is type(packet)


def decodes_canonically_or_is_refused(frame_type: int, payload: bytes) -> None:
    """Either PacketFormatError, or a packet that encodes back to exactly ``payload`` (the
    encoding is canonical, so nothing in the payload was ignored)."""
    try:
        packet = decode_packet(frame_type, payload)
    except PacketFormatError:
        return
    assert encode_packet(packet) == (frame_type, payload)


@settings(max_examples=FUZZ_EXAMPLES)
@given(st.sampled_from(PacketType), st.binary(max_size=120))
def test_random_payloads_raise_only_packet_format_error(frame_type, payload):
    decodes_canonically_or_is_refused(frame_type, payload)


@settings(max_examples=FUZZ_EXAMPLES)
@given(PACKETS, st.data())
def test_mutated_payloads_decode_canonically_or_raise_packet_format_error(packet, data):
    frame_type, payload = encode_packet(packet)
    mutated = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        if not mutated:
            break
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.integers(0, 255))
    decodes_canonically_or_is_refused(frame_type, bytes(mutated))


@given(PACKETS, st.data())
def test_truncated_or_extended_payloads_are_refused(packet, data):
    frame_type, payload = encode_packet(packet)
    cut = data.draw(st.integers(0, len(payload) - 1)) if payload else 0
    for broken in (payload[:cut], payload + data.draw(st.binary(min_size=1, max_size=9))):
        if broken != payload:
            with pytest.raises(PacketFormatError):
                decode_packet(frame_type, broken)


@given(PACKETS, st.sampled_from(PacketType))
def test_a_payload_under_another_frame_type_decodes_canonically_or_is_refused(packet, other):
    decodes_canonically_or_is_refused(other, encode_packet(packet)[1])


@given(st.integers(0, 255).filter(lambda t: t not in PACKET_TYPES), st.binary(max_size=20))
def test_unknown_frame_types_are_refused(frame_type, payload):
    with pytest.raises(PacketFormatError, match=f"frame type {frame_type}: not a core protocol"):
        decode_packet(frame_type, payload)


def outcome(decode: Any, payload: bytes) -> object:
    """The decoded packet, or the text of the PacketFormatError ``decode`` raised."""
    try:
        return decode(payload)
    except PacketFormatError as error:
        return str(error)


@settings(max_examples=FUZZ_EXAMPLES)
@given(st.one_of(*(STRATEGIES[cls] for cls in HOT_PATH)), st.data())
def test_hot_path_codecs_agree_with_the_generic_layout(packet, data):
    cls = type(packet)
    frame_type, payload = encode_packet(packet)
    layout = LAYOUTS[cls]
    assert payload == layout.encode(packet)
    mutated = bytearray(payload)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.sampled_from([0, 1, 2, 255, data.draw(st.integers(0, 255))]))
    mutated += data.draw(st.binary(max_size=2))
    del mutated[len(mutated) - data.draw(st.integers(0, 2)) :]
    candidate = bytes(mutated)
    # Compared by repr: mutated bytes may decode to a NaN header, which equals nothing.
    assert repr(outcome(lambda p: decode_packet(frame_type, p), candidate)) == repr(
        outcome(layout.decode, candidate)
    )


@given(st.one_of(*(STRATEGIES[cls] for cls in HOT_PATH)), st.data())
def test_hot_path_encoders_refuse_what_the_generic_layout_refuses(packet, data):
    cls = type(packet)
    numbers = [f.name for f in attrs.fields(cls) if f.name not in ("message", "cumulative")]
    name = data.draw(st.sampled_from(numbers))
    bad = data.draw(st.sampled_from([-1, 1 << 64, 1 << 32, 1 << 16]))
    broken = attrs.evolve(packet, **{name: bad})
    assert outcome(lambda p: encode_packet(p)[1], broken) == outcome(LAYOUTS[cls].encode, broken)


@given(U64, st.none() | U64, BATCHES)
def test_sends_of_encoded_messages_encode_as_their_packets(first_sequence, tx_id, messages):
    """The client's SEND or SEND_MANY of messages it encoded already is byte for byte the
    packet's own encoding."""
    encoded = [encode_message(message) for message in messages]
    packet: Packet = (
        Send(first_sequence, tx_id, messages[0])
        if len(messages) == 1
        else SendMany(first_sequence, tx_id, messages)
    )
    assert encode_sends(first_sequence, tx_id, encoded) == encode_packet(packet)
