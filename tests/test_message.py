"""The message codec: round trips, exact sizes, and malformed buffers refused clearly."""

from __future__ import annotations

import struct
import tracemalloc

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.message import (
    Message,
    MessageFormatError,
    _decode_checked,
    bytes_header_encoder,
    decode_message,
    encode_headers,
    encode_message,
    encode_message_parts,
    measured,
)

I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
header_values = st.one_of(
    st.text(),
    I64,
    st.floats(allow_nan=False),
    st.booleans(),
    st.binary(),
)
messages = st.builds(
    Message,
    id=st.integers(min_value=0, max_value=(1 << 63) - 1),
    address=st.text(max_size=50),
    durable=st.booleans(),
    headers=st.dictionaries(st.text(max_size=20), header_values, max_size=8),
    body=st.binary(max_size=2000),
    duplicate_id=st.none() | st.binary(max_size=40),
    timestamp_ns=I64,
)


def sample(**changes: object) -> Message:
    fields: dict[str, object] = {
        "id": 7,
        "address": "orders",
        "durable": True,
        "headers": {"kind": "new", "n": 3, "price": 9.5, "urgent": True, "raw": b"\x00"},
        "body": b"hello",
        "duplicate_id": b"dup-1",
        "timestamp_ns": 1_700_000_000_000_000_000,
    }
    fields.update(changes)
    return Message(**fields)  # type: ignore[arg-type]


@given(messages)
def test_every_message_round_trips_and_its_size_is_the_encoded_length(message):
    data = encode_message(message)
    decoded = decode_message(data)
    assert decoded == message
    assert message.size == len(data)
    assert [type(v) for v in decoded.headers.values()] == [
        type(v) for v in message.headers.values()
    ]


def decodes_exactly_or_is_refused(data: bytes) -> None:
    """Either MessageFormatError, or a message that encodes back to the very same bytes
    (the encoding is canonical, so nothing in the buffer was ignored)."""
    try:
        message = decode_message(data)
    except MessageFormatError:
        return
    assert encode_message(message) == data


@given(st.binary(max_size=300))
def test_random_bytes_raise_only_message_format_error(data):
    decodes_exactly_or_is_refused(data)


@given(messages, st.data())
def test_mutated_messages_decode_or_raise_message_format_error(message, data):
    encoded = bytearray(encode_message(message))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    decodes_exactly_or_is_refused(bytes(encoded))


def outcome(decode: object, data: bytes) -> object:
    try:
        return decode(memoryview(data))  # type: ignore[operator]
    except MessageFormatError as error:
        return ("refused", str(error))


@given(messages, st.data())
def test_the_straight_pass_decodes_as_the_checking_decoder_does(message, data):
    encoded = bytearray(encode_message(message))
    assert outcome(decode_message, bytes(encoded)) == outcome(_decode_checked, bytes(encoded))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    for buffer in (bytes(encoded), bytes(encoded[:cut])):
        assert outcome(decode_message, buffer) == outcome(_decode_checked, buffer)


def afresh(message: Message, message_id: int | None = None) -> Message:
    """The same message built anew (nothing of it counted or encoded yet)."""
    return Message(
        message.id if message_id is None else message_id,
        message.address,
        message.durable,
        message.headers,
        message.body,
        message.duplicate_id,
        message.timestamp_ns,
    )


@given(messages)
def test_a_size_counted_without_encoding_is_the_encoded_length(message):
    fresh = afresh(message)
    assert fresh.size == len(encode_message(message))
    assert decode_message(encode_message(message)).with_id(5).size == fresh.size
    parts = encode_message_parts(message)
    assert b"".join(parts) == encode_message(message)


@given(messages, st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_the_kept_fields_encode_as_a_fresh_encoding_does(message, new_id):
    """A decoded message, and the same under another id, keep the encoding of their fields
    (``_encoded_fields``) and encode exactly as a message built afresh."""
    decoded = decode_message(encode_message(message))
    renumbered = decoded.with_id(new_id)
    fresh = afresh(message, new_id)
    assert renumbered._encoded_fields is decoded._encoded_fields is not None
    assert fresh._encoded_fields is None
    assert encode_message(renumbered) == encode_message(fresh)
    assert decode_message(encode_message(renumbered)) == fresh


@given(messages, st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_a_fresh_durable_message_is_encoded_once_when_numbered(message, new_id):
    """``with_id`` of a durable message built afresh (a head's send) encodes its fields
    there, once: its size is known from them, and its encoding is a fresh one's."""
    numbered = afresh(attrs.evolve(message, durable=True)).with_id(new_id)
    fresh = afresh(numbered)
    assert numbered._encoded_fields is not None
    assert numbered.size == fresh.size == len(encode_message(fresh))
    assert encode_message(numbered) == encode_message(fresh)
    assert afresh(attrs.evolve(message, durable=False)).with_id(new_id)._encoded_fields is None


@given(messages, st.booleans())
def test_a_measured_message_is_sized_and_encoded_as_a_fresh_one(message, durable):
    """``measured`` (a head's new message) fills in the size a fresh count gives; it
    encodes the fields up front only for a durable message with headers (counting walks
    them), and a message without headers has them encoded when first needed."""
    built = afresh(attrs.evolve(message, durable=durable))
    sized = measured(afresh(built))
    assert sized.size == len(encode_message(built))
    assert (sized._encoded_fields is not None) == (durable and bool(message.headers))
    assert encode_message(sized) == encode_message(built)
    assert sized._encoded_fields is not None or not durable


@given(messages, st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_a_durable_message_built_numbered_keeps_its_fields_once_encoded(message, new_id):
    """A durable message a head builds with its id (never renumbered) keeps the encoding
    of its fields from its first encoding (its store row, or a delivery), for the next;
    a non-durable one keeps none."""
    durable = afresh(attrs.evolve(message, durable=True), new_id)
    first = encode_message(durable)
    assert durable._encoded_fields is not None
    assert encode_message(durable) == first == encode_message(afresh(durable))
    assert durable.size == len(first)
    transient = afresh(attrs.evolve(message, durable=False), new_id)
    encode_message(transient)
    assert transient._encoded_fields is None


@given(
    messages,
    st.text(max_size=50),
    st.dictionaries(st.text(max_size=20), header_values, max_size=3),
    st.booleans(),
)
def test_a_forward_spliced_from_kept_fields_encodes_as_a_fresh_one(message, address, added, kept):
    """``forwarded`` of a message whose fields are encoded (decoded, or numbered by a
    node), or of a durable one (its fields encoded then, and kept for its store row),
    splices the forward's from them: the same bytes and size as the forward built afresh
    (id and timestamp 0, the added headers after the message's own)."""
    added = {key: value for key, value in added.items() if key not in message.headers}
    source = decode_message(encode_message(message)) if kept else afresh(message)
    forward = source.forwarded(address, added)
    fresh = Message(
        0,
        address,
        message.durable,
        {**message.headers, **added},
        message.body,
        message.duplicate_id,
    )
    assert (forward._encoded_fields is not None) == (kept or message.durable)
    assert (source._encoded_fields is not None) == (kept or message.durable)
    assert encode_message(source) == encode_message(message)
    assert forward.size == fresh.size
    assert encode_message(forward) == encode_message(fresh)
    assert decode_message(encode_message(forward)) == fresh
    assert forward.size == len(encode_message(fresh))


@given(
    messages,
    st.dictionaries(st.text(max_size=20), header_values, min_size=1, max_size=3),
)
def test_a_forward_handed_its_added_headers_encoded_is_the_one_encoding_them(message, added):
    """``forwarded`` with ``encode_headers(added)`` (a bridge works those out once) makes
    the same message, fields and size as ``forwarded`` encoding them itself."""
    added = {key: value for key, value in added.items() if key not in message.headers}
    source = decode_message(encode_message(message))
    handed = source.forwarded("orders", added, encode_headers(added))
    itself = source.forwarded("orders", added)
    assert handed == itself
    assert handed._encoded_fields == itself._encoded_fields is not None
    assert handed.size == itself.size
    assert encode_message(handed) == encode_message(itself)


@given(st.text(max_size=20), st.binary(max_size=100))
def test_a_bytes_header_encoder_encodes_as_encode_headers_does(key, value):
    assert bytes_header_encoder(key)(value) == encode_headers({key: value})


def test_headers_that_cannot_be_encoded_are_named():
    with pytest.raises(MessageFormatError, match="does not fit in 64 bits"):
        encode_headers({"n": 1 << 64})
    with pytest.raises(MessageFormatError, match="cannot be encoded as UTF-8"):
        bytes_header_encoder("\udcff")


def test_a_forward_that_cannot_be_encoded_is_refused_by_name_when_encoded():
    source = decode_message(encode_message(sample()))
    assert source.forwarded("\udcff", {})._encoded_fields is None
    with pytest.raises(MessageFormatError, match="address cannot be encoded as UTF-8"):
        encode_message(source.forwarded("\udcff", {}))
    forward = source.forwarded("orders", {"n": 1 << 64})
    assert forward._encoded_fields is None
    with pytest.raises(MessageFormatError, match="does not fit in 64 bits"):
        encode_message(forward)


def test_a_durable_message_that_cannot_be_encoded_is_numbered_and_refused_when_encoded():
    numbered = sample(durable=True, headers={"n": 1 << 64}).with_id(7)
    assert numbered._encoded_fields is None
    with pytest.raises(MessageFormatError, match="does not fit in 64 bits"):
        encode_message(numbered)


@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"address": "q\udcff"}, "address cannot be encoded as UTF-8"),
        ({"headers": {"k": "\udcff"}}, "header 'k' cannot be encoded as UTF-8"),
        ({"headers": {1: "v"}}, "header key 1 is not a string"),
        ({"headers": {"k": None}}, "header 'k': NoneType is not one of"),
    ],
)
def test_a_message_that_cannot_be_encoded_is_named_when_numbered_or_sized(durable, fields, error):
    """Counting a message's size (which numbering it does) names what cannot be encoded,
    as encoding it would, not a codec's or attribute's error."""
    with pytest.raises(MessageFormatError, match=error):
        sample(durable=durable, **fields).with_id(7)
    with pytest.raises(MessageFormatError, match=error):
        _ = sample(durable=durable, **fields).size


def test_an_id_or_timestamp_out_of_range_is_named_with_kept_fields():
    with pytest.raises(MessageFormatError, match=r"message id .* does not fit in 64 bits"):
        encode_message(decode_message(encode_message(sample())).with_id(1 << 64))
    with pytest.raises(MessageFormatError, match=r"timestamp .* does not fit in 64 bits"):
        encode_message(sample(timestamp_ns=1 << 63))


def test_every_truncation_is_refused_with_the_offset():
    data = encode_message(sample())
    for length in range(len(data)):
        with pytest.raises(MessageFormatError, match="truncated at offset"):
            decode_message(data[:length])


def test_a_huge_declared_length_allocates_nothing_near_it():
    data = encode_message(sample(body=b""))
    # Claim a 4 GiB body in a buffer of a few dozen bytes.
    hostile = data[:-4] + struct.pack(">I", 0xFFFF_FFFF)
    tracemalloc.start()
    try:
        with pytest.raises(MessageFormatError, match="body of 4294967295 bytes"):
            decode_message(hostile)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


@pytest.mark.parametrize(
    ("mangle", "error"),
    [
        (lambda d: b"\x02" + d[1:], "unknown message format version 2"),
        (lambda d: d[:1] + b"\x80" + d[2:], "unknown flags 0x80"),
        (lambda d: d + b"xyz", "3 bytes follow the end of the message"),
    ],
)
def test_malformed_buffers_name_what_is_wrong(mangle, error):
    with pytest.raises(MessageFormatError, match=error):
        decode_message(mangle(encode_message(sample())))


def test_an_unknown_header_tag_is_named():
    data = encode_message(sample(headers={"k": True}, duplicate_id=None))
    tag_at = data.index(b"k") + 1
    with pytest.raises(MessageFormatError, match="header 'k' has unknown type tag 9"):
        decode_message(data[:tag_at] + b"\x09" + data[tag_at + 1 :])


def test_a_repeated_header_key_is_refused():
    data = encode_message(sample(headers={"a": True, "b": False}, duplicate_id=None))
    with pytest.raises(MessageFormatError, match="header 'a' appears twice"):
        decode_message(data.replace(b"\x00\x01b", b"\x00\x01a"))


def test_invalid_utf8_is_refused():
    data = encode_message(sample(address="zz", headers={}, duplicate_id=None))
    with pytest.raises(MessageFormatError, match="address at offset 20 is not UTF-8"):
        decode_message(data.replace(b"zz", b"\xff\xfe"))


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"headers": {"n": 1 << 63}}, "header 'n': int 9223372036854775808 does not fit"),
        ({"headers": {"n": None}}, "header 'n': NoneType is not one of"),
        ({"headers": {1: "x"}}, "header key 1 is not a string"),
        ({"address": "\ud800"}, "address cannot be encoded as UTF-8"),
        ({"address": "a" * 70_000}, "address is 70000 bytes, at most 65535 fit"),
        ({"id": -(1 << 64)}, "message id .* does not fit in 64 bits"),
        ({"headers": {"k" * 70_000: "x"}}, "header key 'k+' is 70000 bytes, at most 65535"),
        ({"headers": {"\ud800": "x"}}, "header key .* cannot be encoded as UTF-8"),
        ({"headers": {"k": "\ud800"}}, "header 'k' cannot be encoded as UTF-8"),
    ],
)
def test_what_cannot_be_encoded_is_named(changes, error):
    with pytest.raises(MessageFormatError, match=error):
        encode_message(sample(**changes))


def test_a_text_header_too_long_for_its_length_field_is_named_after_numbering():
    """A node numbers a durable message (``with_id``) before its store encodes it: the
    fields that do not fit are left unencoded there, and named when it is encoded."""
    numbered = sample(headers={"k" * 70_000: "x", "v": "x"}).with_id(8)
    assert numbered._encoded_fields is None
    with pytest.raises(MessageFormatError, match=r"header key 'k+' is 70000 bytes"):
        encode_message(numbered)


def test_messages_with_header_dicts_are_hashable_and_compare_by_value():
    assert sample() == sample()
    assert hash(sample()) == hash(sample())
    assert sample() != sample(body=b"other")


def test_a_message_reads_its_attributes_the_fast_way():
    """``Message`` has no ``__getattr__`` (``functools.cached_property`` on a slotted attrs
    class adds one): with it, every attribute read of every message would take the
    interpreter's generic path. Its size is still counted once, on first read."""
    assert "__getattr__" not in vars(Message)
    message = sample()
    assert message._size is None
    assert message.size == len(encode_message(message)) == message._size
