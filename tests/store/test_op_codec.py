"""The replication codec: every operation survives the trip, and bytes that are not a
well-formed list of them fail with an error naming what is wrong."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.store.op_codec import (
    OperationFormatError,
    _encode,
    decode_operations,
    encode_operations,
)
from bridge.store.operations import (
    Acknowledge,
    AcknowledgeMany,
    AddMessage,
    CommitTransaction,
    CreateQueue,
    DeleteQueue,
    PageMessage,
    ReleasePages,
    ReserveIds,
    StoreDuplicateId,
    UpdateDeliveryCount,
)
from bridge.store.records import QueueRecord

ids = st.integers(min_value=0, max_value=2**63 - 1)
names = st.text(max_size=20)
duplicates = st.builds(StoreDuplicateId, names, st.binary(max_size=40), ids)
plain = st.one_of(
    st.builds(
        AddMessage,
        ids,
        st.lists(names, max_size=3).map(tuple),
        st.binary(max_size=200),
        st.none() | ids,
        st.none() | names,
        st.none() | duplicates,
    ),
    st.builds(Acknowledge, names, ids),
    st.builds(AcknowledgeMany, names, st.lists(ids, max_size=5).map(tuple)),
    st.builds(UpdateDeliveryCount, names, ids, ids),
    duplicates,
    st.builds(
        CreateQueue,
        st.builds(QueueRecord, names, names, st.sampled_from(("anycast", "multicast")), names),
    ),
    st.builds(DeleteQueue, names),
    st.builds(PageMessage, ids, ids, st.binary(max_size=50)),
    st.builds(ReleasePages, st.lists(ids, max_size=5).map(tuple)),
    st.builds(ReserveIds, ids),
)
operations = st.one_of(plain, st.builds(CommitTransaction, st.lists(plain, max_size=4).map(tuple)))


@given(st.lists(operations, max_size=8))
def test_operations_survive_the_trip(batch):
    assert decode_operations(encode_operations(batch)) == batch


@given(st.lists(operations, min_size=1, max_size=4), st.data())
def test_cut_short_is_named(batch, data):
    encoded = encode_operations(batch)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(OperationFormatError, match=r"truncated|list of"):
        decode_operations(encoded[:cut])


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_with_the_format_error(data):
    with contextlib.suppress(OperationFormatError):
        decode_operations(data)


def as_bytes(value: list[Any]) -> bytes:
    """Any value in the codec's format, well-formed operations or not."""
    parts: list[bytes] = []
    _encode(value, parts)
    return b"".join(parts)


def test_errors_name_the_fault():
    with pytest.raises(OperationFormatError, match="2 bytes after the operations"):
        decode_operations(encode_operations([DeleteQueue("q")]) + b"\0\0")
    with pytest.raises(OperationFormatError, match="unknown operation 'explode'"):
        decode_operations(as_bytes([["explode"]]))
    with pytest.raises(OperationFormatError, match="'ack' is malformed: queue is int"):
        decode_operations(as_bytes([["ack", 3, 4]]))
    with pytest.raises(OperationFormatError, match="unknown tag 9"):
        decode_operations(b"\x09")
    with pytest.raises(OperationFormatError, match="nested deeper"):
        decode_operations(b"\x05\x00\x00\x00\x01" * 10)
