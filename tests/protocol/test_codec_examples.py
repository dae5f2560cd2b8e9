"""Concrete encodings (golden bytes, so the wire format cannot change silently), the errors
malformed payloads and unencodable packets get, and what decoding may allocate."""

from __future__ import annotations

import tracemalloc

import pytest

from bridge.message import Message, encode_message
from bridge.protocol import (
    PACKET_CLASSES,
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

MESSAGE = Message(id=7, address="q", durable=True, headers={"k": 1}, body=b"hi")
# version 1, flags durable, id 7, timestamp 0, address "q", 1 header "k" int 1, body "hi"
MESSAGE_HEX = (
    "01 01 0000000000000007 0000000000000000 0001 71 0001 0001 6b 02 0000000000000001 00000002 6869"
)
HEADER_ONLY = Message(id=0, address="q", durable=False, headers={}, body=b"")
HEADER_ONLY_HEX = "01 00 0000000000000000 0000000000000000 0001 71 0000 00000000"

# One packet of every type (more for the hot path's layouts), and its payload field by field.
GOLDEN: list[tuple[Packet, int, str]] = [
    (
        Connect(1, "cli", None, "pw", 65536),
        16,
        "0001 | 0003 636c69 | 00 | 01 0002 7077 | 00010000 | 00400000",
    ),
    (
        Connect(2, "cli", None, None, 65536, 1024),
        16,
        "0002 | 0003 636c69 | 00 | 00 | 00010000 | 00000400",
    ),
    (Connected("a", "id1", 1, -1), 17, "0001 61 | 0003 696431 | 0001 | ffffffff | 00400000"),
    (Ok(5), 32, "0000000000000005"),
    (Failed(5, ErrorCode.PERMISSION_DENIED, "no"), 33, "0000000000000005 | 0002 | 00000002 6e6f"),
    (
        CreateQueue(1, "q", "a", Routing.MULTICAST, True, "x=1"),
        48,
        "0000000000000001 | 0001 71 | 0001 61 | 02 | 01 | 01 0003 783d31",
    ),
    (DeleteQueue(2, "q"), 49, "0000000000000002 | 0001 71"),
    (Send(3, None, MESSAGE), 64, f"0000000000000003 | 00 | 00000029 {MESSAGE_HEX}"),
    (
        Send(4, 9, MESSAGE),
        64,
        f"0000000000000004 | 01 0000000000000009 | 00000029 {MESSAGE_HEX}",
    ),
    (SendConfirmed(3), 65, "0000000000000003"),
    (
        SendFailed(4, ErrorCode.ADDRESS_FULL, "full"),
        66,
        "0000000000000004 | 0006 | 00000004 66756c6c",
    ),
    (ProducerCredits("a", 1024), 67, "0001 61 | 00000400"),
    (
        SendLargeBegin(5, 9, HEADER_ONLY, 1 << 30),
        68,
        f"0000000000000005 | 01 0000000000000009 | 0000001b {HEADER_ONLY_HEX} | 0000000040000000",
    ),
    (SendLargeChunk(5, b"abc", True), 69, "0000000000000005 | 00000003 616263 | 01"),
    (
        SendMany(6, None, (MESSAGE, HEADER_ONLY)),
        70,
        f"0000000000000006 | 00 | 00000002 | 00000029 {MESSAGE_HEX} | 0000001b {HEADER_ONLY_HEX}",
    ),
    (
        SendMany(8, 9, (MESSAGE,)),
        70,
        f"0000000000000008 | 01 0000000000000009 | 00000001 | 00000029 {MESSAGE_HEX}",
    ),
    (
        CreateConsumer(6, 1, "q", None, False, 0),
        80,
        "0000000000000006 | 00000001 | 0001 71 | 00 | 00 | 00000000",
    ),
    (
        CreateConsumer(6, 2, "q", "a>1", True, -1),
        80,
        "0000000000000006 | 00000002 | 0001 71 | 01 0003 613e31 | 01 | ffffffff",
    ),
    (CloseConsumer(7, 1), 81, "0000000000000007 | 00000001"),
    (
        Deliver(1, 10, 2, MESSAGE),
        82,
        f"00000001 | 000000000000000a | 00000002 | 00000029 {MESSAGE_HEX}",
    ),
    (ConsumerCredits(1, 4096), 83, "00000001 | 00001000"),
    (Ack(1, 10, False, None, None), 84, "00000001 | 000000000000000a | 00 | 00 | 00"),
    (
        Ack(1, 10, True, None, 8),
        84,
        "00000001 | 000000000000000a | 01 | 00 | 01 0000000000000008",
    ),
    (
        Ack(2, 3, False, 4, None),
        84,
        "00000002 | 0000000000000003 | 00 | 01 0000000000000004 | 00",
    ),
    (
        Ack(2, 3, True, 4, 5),
        84,
        "00000002 | 0000000000000003 | 01 | 01 0000000000000004 | 01 0000000000000005",
    ),
    (Nack(1, 11, True), 85, "00000001 | 000000000000000b | 01"),
    (
        DeliverLargeBegin(1, 12, 1, HEADER_ONLY, 300_000),
        86,
        f"00000001 | 000000000000000c | 00000001 | 0000001b {HEADER_ONLY_HEX} | 00000000000493e0",
    ),
    (
        DeliverLargeChunk(1, 12, b"xyz", False),
        87,
        "00000001 | 000000000000000c | 00000003 78797a | 00",
    ),
    (
        DeliverMany(1, 13, 1, (MESSAGE, MESSAGE)),
        88,
        f"00000001 | 000000000000000d | 00000001 | 00000002"
        f" | 00000029 {MESSAGE_HEX} | 00000029 {MESSAGE_HEX}",
    ),
    (TxBegin(9, 100), 96, "0000000000000009 | 0000000000000064"),
    (TxCommit(10, 100), 97, "000000000000000a | 0000000000000064"),
    (TxRollback(11, 101), 98, "000000000000000b | 0000000000000065"),
    (QueryAddress(12, "orders"), 112, "000000000000000c | 0006 6f7264657273"),
    (
        AddressInfo(12, True, True, Routing.ANYCAST, 1 << 20, AddressFullPolicy.BLOCK, 20000),
        113,
        "000000000000000c | 01 | 01 | 01 01 | 0000000000100000 | 02 | 0000000000004e20",
    ),
    (
        AddressInfo(13, False, False, None, -1, AddressFullPolicy.PAGE, 0),
        113,
        "000000000000000d | 00 | 00 | 00 | ffffffffffffffff | 01 | 0000000000000000",
    ),
    (
        ReplicaAnnounce("b", "b/1", 3, True, 2),
        128,
        "0001 62 | 0003 622f31 | 0003 | 01 | 0000000000000002",
    ),
    (ReplicaSyncBegin("a", 7, 3), 129, "0001 61 | 0000000000000007 | 0003"),
    (ReplicaSyncFile(b"\x05"), 130, "00000001 05"),
    (ReplicaBody(9, b"ab", False), 131, "0000000000000009 | 00000002 6162 | 00"),
    (ReplicaSyncEnd(4), 132, "0000000000000004"),
    (ReplicaSynced(4), 133, "0000000000000004"),
    (ReplicaBatch(5, b"\x00"), 134, "0000000000000005 | 00000001 00"),
    (ReplicaAck(5), 135, "0000000000000005"),
    (ReplicaDiscard(9), 136, "0000000000000009"),
    (
        VoteRequest("b", "b/1", "tcp://a", 3, 500),
        137,
        "0001 62 | 0003 622f31 | 0007 7463703a2f2f61 | 0000000000000003 | 000001f4",
    ),
    (VoteReply(False, "up", 2), 138, "00 | 00000002 7570 | 0000000000000002"),
    (
        Topology((TopologyMember("a", "h1", ("tcp://x:1",), ("a",), ("b",)),)),
        140,
        "0001 | 0001 61 | 0002 6831 | 0001 0009 7463703a2f2f783a31 | 0001 0001 61 | 0001 0001 62",
    ),
    (Redirect("a", ("tcp://c:2",)), 141, "0001 61 | 0001 0009 7463703a2f2f633a32"),
    (Redirect("a", ()), 141, "0001 61 | 0000"),
    (
        ClusterConnect(4, "cli", "u", None, 65536, 1024, "a"),
        142,
        "0004 | 0003 636c69 | 01 0001 75 | 00 | 00010000 | 00000400 | 0001 61",
    ),
    (
        NodeAnnounce("b", "h2", ("tcp://y:3",), ("b",)),
        143,
        "0001 62 | 0002 6832 | 0001 0009 7463703a2f2f793a33 | 0001 0001 62",
    ),
    (
        ReattachConsumer(1, 2, "q", None, False, -1, (5, 6)),
        144,
        "0000000000000001 | 00000002 | 0001 71 | 00 | 00 | ffffffff"
        " | 0002 0000000000000005 0000000000000006",
    ),
    (
        Reattached(1, (ClaimedDelivery(5, 1),), (7,)),
        145,
        "0000000000000001 | 0001 0000000000000005 0000000000000001 | 0001 0000000000000007",
    ),
]


def unhex(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", ""))


def test_the_golden_table_covers_every_packet_type():
    assert {type(packet) for packet, _, _ in GOLDEN} == set(PACKET_CLASSES)


@pytest.mark.parametrize(
    ("packet", "frame_type", "payload"), GOLDEN, ids=lambda v: type(v).__name__
)
def test_golden_encodings(packet, frame_type, payload):
    assert encode_packet(packet) == (frame_type, unhex(payload))
    assert decode_packet(frame_type, unhex(payload)) == packet


def test_the_golden_messages_are_bridge_message_encodings():
    assert encode_message(MESSAGE) == unhex(MESSAGE_HEX)
    assert encode_message(HEADER_ONLY) == unhex(HEADER_ONLY_HEX)


@pytest.mark.parametrize(
    ("frame_type", "payload", "error"),
    [
        (16, "0001 | 0003 636c69 | 02", r"CONNECT\.user at offset 7: flag byte is 2, not 0 or 1"),
        (16, "00", r"CONNECT\.protocol_version at offset 0: truncated: 2 bytes needed, 1 remain"),
        (
            140,
            "ffff",
            r"TOPOLOGY\.members at offset 0: truncated: 65535 items declared, 0 bytes remain",
        ),
        (
            140,
            "0001 | 0001 61 | 0001 62 | 0001 0005 6162",
            r"TOPOLOGY\.members at offset 0: urls: truncated: 5 bytes declared, 2 remain",
        ),
        (
            17,
            "0001 61 | 0001 62 | 0001 | fffffffe",
            r"CONNECTED\.producer_window_size at offset 8: -2 is not in -1\.\.2147483647",
        ),
        (32, "0000000000000005 | 00", r"OK at offset 8: 1 trailing byte\(s\) after the last field"),
        (
            70,
            "0000000000000006 | 00 | 00000000",
            r"SEND_MANY\.messages at offset 9: a batch holds at least one message",
        ),
        (
            70,
            "0000000000000006 | 00 | 00000003 | 00000001 00",
            r"SEND_MANY\.messages at offset 9: truncated: 3 messages declared, 5 bytes remain",
        ),
        (
            70,
            f"0000000000000006 | 00 | 00000001 | 00000029 02{MESSAGE_HEX[2:]}",
            r"SEND_MANY\.messages at offset 9: malformed message \(offsets within it\): unknown"
            r" message format version 2",
        ),
        (
            70,
            f"0000000000000006 | 00 | 00000002 | 00000029 {MESSAGE_HEX} | 0000002a {MESSAGE_HEX}",
            r"SEND_MANY\.messages at offset 9: truncated: 42 bytes declared, 41 remain",
        ),
        (
            88,
            f"00000001 | 000000000000000d | 00000001 | 00000002 | 00000029 {MESSAGE_HEX} | 0000",
            r"DELIVER_MANY\.messages at offset 16: truncated: 4 bytes needed, 2 remain",
        ),
        (
            33,
            "0000000000000005 | 0063 | 00000000",
            r"FAILED\.code at offset 8: 99 is not a valid ErrorCode",
        ),
        (
            33,
            "0000000000000005 | 0001 | 00000009 6e6f",
            r"FAILED\.message at offset 10: truncated: 9 bytes declared, 2 remain",
        ),
        (
            48,
            "0000000000000001 | 0001 71 | 0001 61 | 03 | 01 | 00",
            r"CREATE_QUEUE\.routing at offset 14: 3 is not a valid Routing",
        ),
        (
            48,
            "0000000000000001 | 0001 71 | 0001 61 | 01 | 05 | 00",
            r"CREATE_QUEUE\.durable at offset 15: flag byte is 5",
        ),
        (49, "0000000000000002 | 0002 fffe", r"DELETE_QUEUE\.name at offset 8: not UTF-8"),
        (
            64,
            f"0000000000000003 | 00 | 00000029 02{MESSAGE_HEX[2:]}",
            r"SEND\.message at offset 9: malformed message \(offsets within it\): unknown message"
            r" format version 2",
        ),
        (
            64,
            f"0000000000000003 | 00 | 0000002a {MESSAGE_HEX}",
            r"SEND\.message at offset 9: truncated: 42 bytes declared, 41 remain",
        ),
        (
            64,
            f"0000000000000003 | 03 | 00000029 {MESSAGE_HEX}",
            r"SEND\.tx_id at offset 8: flag byte is 3",
        ),
        (
            65,
            "000000",
            r"SEND_CONFIRMED\.up_to_sequence at offset 0: truncated: 8 bytes needed, 3 remain",
        ),
        (
            68,
            f"0000000000000005 | 00 | 00000029 {MESSAGE_HEX} | 0000000000000002",
            r"SEND_LARGE_BEGIN\.message at offset 9: a large message's body must be empty",
        ),
        (
            80,
            "0000000000000006 | 00000001 | 0001 71 | 00 | 00 | fffffffe",
            r"CREATE_CONSUMER\.window_size at offset 17: -2 is not in -1",
        ),
        (
            82,
            f"00000001 | 000000000000000a | 00000002 | ffffffff {MESSAGE_HEX}",
            r"DELIVER\.message at offset 16: truncated: 4294967295 bytes declared",
        ),
        (83, "00000001 | 00001000 | 00", r"CONSUMER_CREDITS at offset 8: 1 trailing byte"),
        (
            84,
            "00000001 | 000000000000000a | 02 | 00 | 00",
            r"ACK\.cumulative at offset 12: flag byte is 2",
        ),
        (
            84,
            "00000001 | 000000000000000a | 00 | 01 0000000000000004 | 07",
            r"ACK\.request_id at offset 22: flag byte is 7",
        ),
        (
            84,
            "00000001 | 000000000000000a | 00 | 00",
            r"ACK\.request_id at offset 14: truncated: 1 byte needed, 0 remain",
        ),
        (
            87,
            "00000001 | 000000000000000c | 00000003 78797a | 02",
            r"DELIVER_LARGE_CHUNK\.last at offset 19: flag byte is 2",
        ),
        (
            112,
            "000000000000000c | 0007 6f7264657273",
            r"QUERY_ADDRESS\.address at offset 8: truncated: 7 bytes declared, 6 remain",
        ),
        (
            113,
            "000000000000000c | 01 | 01 | 01 04 | 0000000000100000 | 02 | 0000000000004e20",
            r"ADDRESS_INFO\.routing at offset 10: 4 is not a valid Routing",
        ),
        (
            113,
            "000000000000000c | 01 | 01 | 00 | fffffffffffffffe | 02 | 0000000000004e20",
            r"ADDRESS_INFO\.max_size_bytes at offset 11: -2 is not in -1\.\.9223372036854775807",
        ),
        (
            113,
            "000000000000000c | 01 | 01 | 00 | ffffffffffffffff | 05 | 0000000000004e20",
            r"ADDRESS_INFO\.address_full_policy at offset 19: 5 is not a valid AddressFullPolicy",
        ),
        (
            113,
            "000000000000000c | 01 | 02 | 00 | ffffffffffffffff | 01 | 0000000000004e20",
            r"ADDRESS_INFO\.auto_create at offset 9: flag byte is 2",
        ),
        (
            113,
            "000000000000000c | 01 | 01 | 00 | ffffffffffffffff | 01 | 00000000",
            r"ADDRESS_INFO\.id_cache_size at offset 20: truncated: 8 bytes needed, 4 remain",
        ),
        (15, "", r"frame type 15: not a core protocol packet type"),
        (99, "00", r"frame type 99: not a core protocol packet type"),
    ],
)
def test_malformed_payloads_name_the_packet_field_and_offset(frame_type, payload, error):
    with pytest.raises(PacketFormatError, match=error):
        decode_packet(frame_type, unhex(payload))


def test_the_error_carries_packet_field_and_offset():
    with pytest.raises(PacketFormatError) as caught:
        decode_packet(PacketType.ACK, unhex("00000001 | 000000000000000a | 02 | 00 | 00"))
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.packet, error.field, error.offset) == ("ACK", "cumulative", 12)
    assert error.reason == "flag byte is 2, not 0 or 1"


def with_header(name: str, value: object) -> Message:
    return Message(id=1, address="a", durable=False, headers={name: value}, body=b"")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("packet", "error"),
    [
        (
            Ok(1 << 64),
            r"OK\.request_id: 18446744073709551616 is not an integer in 0\.\.18446744073709551615",
        ),
        (Ok(-1), r"OK\.request_id: -1 is not an integer"),
        (SendConfirmed(-1), r"SEND_CONFIRMED\.up_to_sequence: -1 is not an integer"),
        (
            ConsumerCredits(1, 1 << 32),
            r"CONSUMER_CREDITS\.credits: 4294967296 is not an integer in 0\.\.4294967295",
        ),
        (Deliver(1 << 32, 1, 1, MESSAGE), r"DELIVER\.consumer_id: 4294967296 is not an integer"),
        (
            Send(1, None, with_header("n", 1 << 63)),
            r"SEND\.message: cannot encode the message: header 'n': int",
        ),
        (
            Deliver(1, 1, 1, with_header("n", None)),
            r"DELIVER\.message: cannot encode the message: header 'n': NoneType",
        ),
        (Ack(1, 2, True, -1, None), r"ACK\.tx_id: -1 is not an integer"),
        (
            Ack(1, 2, True, None, 1 << 64),
            r"ACK\.request_id: 18446744073709551616 is not an integer",
        ),
        (Ack(1, 2, 1, None, None), r"ACK\.cumulative: 1 is not a bool"),  # type: ignore[arg-type]
        (DeleteQueue(1, "a" * 70_000), r"DELETE_QUEUE\.name: 70000 bytes, at most 65535 fit"),
        (DeleteQueue(1, "\ud800"), r"DELETE_QUEUE\.name: cannot be encoded as UTF-8"),
        (CreateQueue(1, "q", "a", 1, True, None), r"CREATE_QUEUE\.routing: 1 is not a Routing"),  # type: ignore[arg-type]
        (
            CreateQueue(1, "q", "a", Routing.BOTH, True, None),
            r"CREATE_QUEUE\.routing: <Routing.BOTH: 3> is not a Routing of queue routing u8",
        ),
        (
            Connected("a", "b", 1, -2),
            r"CONNECTED\.producer_window_size: -2 is not an integer in -1\.\.2147483647",
        ),
        (
            SendLargeBegin(1, None, MESSAGE, 2),
            r"SEND_LARGE_BEGIN\.message: a large message's body must be empty",
        ),
        (SendLargeChunk(1, "text", False), r"SEND_LARGE_CHUNK\.data: str is not bytes"),  # type: ignore[arg-type]
        (
            AddressInfo(1, True, True, None, -2, AddressFullPolicy.PAGE, 0),
            r"ADDRESS_INFO\.max_size_bytes: -2 is not an integer in -1\.\.9223372036854775807",
        ),
        (
            AddressInfo(1, True, True, None, 1 << 63, AddressFullPolicy.PAGE, 0),
            r"ADDRESS_INFO\.max_size_bytes: 9223372036854775808 is not an integer",
        ),
        (
            AddressInfo(1, True, True, None, -1, "PAGE", 0),  # type: ignore[arg-type]
            r"ADDRESS_INFO\.address_full_policy: 'PAGE' is not a AddressFullPolicy",
        ),
        (
            AddressInfo(1, True, True, "anycast", -1, AddressFullPolicy.PAGE, 0),  # type: ignore[arg-type]
            r"ADDRESS_INFO\.routing: 'anycast' is not a Routing",
        ),
        (
            AddressInfo(1, True, True, None, -1, AddressFullPolicy.PAGE, -1),
            r"ADDRESS_INFO\.id_cache_size: -1 is not an integer",
        ),
    ],
)
def test_unencodable_packets_name_the_packet_and_field(packet, error):
    with pytest.raises(PacketFormatError, match=error):
        encode_packet(packet)


def test_encoding_something_that_is_not_a_packet_is_refused():
    with pytest.raises(PacketFormatError, match="object: not a core protocol packet"):
        encode_packet(object())  # type: ignore[arg-type]


def peak_allocation(action) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("frame_type", "payload"),
    [
        (64, "0000000000000003 | 00 | ffffffff 01"),
        (70, "0000000000000003 | 00 | ffffffff 01"),
        (70, "0000000000000003 | 00 | 00000001 ffffffff 01"),
        (82, "00000001 | 000000000000000a | 00000002 | ffffffff 01"),
        (69, "0000000000000005 | ffffffff 61"),
        (33, "0000000000000005 | 0001 | ffffffff 6e"),
    ],
)
def test_a_huge_declared_length_allocates_nothing_near_it(frame_type, payload):
    def decode() -> None:
        with pytest.raises(PacketFormatError, match=r"4294967295 (bytes|messages) declared"):
            decode_packet(frame_type, unhex(payload))

    assert peak_allocation(decode) < 64 * 1024


@pytest.mark.parametrize("cls", [Send, Deliver])
def test_decoding_copies_a_hot_path_body_once(cls):
    body = bytes(1 << 20)
    message = Message(id=1, address="a", durable=True, headers={}, body=body)
    packet = Send(1, None, message) if cls is Send else Deliver(1, 1, 1, message)
    frame_type, payload = encode_packet(packet)
    decoded: list[Packet] = []
    peak = peak_allocation(lambda: decoded.append(decode_packet(frame_type, payload)))
    assert decoded == [packet]
    assert len(body) <= peak < len(body) + 64 * 1024


@pytest.mark.parametrize("cls", [SendLargeChunk, DeliverLargeChunk, ReplicaBody])
def test_decoding_a_large_chunk_copies_none_of_its_data(cls):
    data = bytes(range(256)) * 4096  # 1 MiB
    packet = {
        SendLargeChunk: lambda: SendLargeChunk(3, data, False),
        DeliverLargeChunk: lambda: DeliverLargeChunk(1, 2, data, True),
        ReplicaBody: lambda: ReplicaBody(9, data, False),
    }[cls]()
    frame_type, payload = encode_packet(packet)
    decoded: list[Packet] = []
    peak = peak_allocation(lambda: decoded.append(decode_packet(frame_type, payload)))
    assert decoded == [packet]
    chunk = decoded[0].data  # type: ignore[union-attr]
    assert isinstance(chunk, memoryview) and chunk.obj is payload
    assert peak < 64 * 1024
    assert encode_packet(decoded[0]) == (frame_type, payload)  # a view encodes as bytes do
