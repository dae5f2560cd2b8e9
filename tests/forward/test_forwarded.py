"""What a bridge sends for each message: the bridge's headers added or replaced hop by hop,
and the stored encoding reused where the message had none of them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.forward.forwarded import Forwarder, Origin
from bridge.message import (
    BRIDGE_DUPLICATE_ID,
    BRIDGE_PATH,
    DELIVERY_COUNT,
    Message,
    decode_message,
    encode_message,
)


def forwarder(**options: object) -> Forwarder:
    return Forwarder(Origin("a", "run-1"), "b", **options)  # type: ignore[arg-type]


def stored(headers: dict[str, object], durable: bool = True, message_id: int = 7) -> Message:
    """A message as a node holds it: numbered, its fields encoded for its store."""
    sent = Message(0, "orders", durable, headers, b"body", b"producer-1")  # type: ignore[arg-type]
    return decode_message(encode_message(sent)).with_id(message_id)


def test_a_first_hop_adds_the_path_and_the_duplicate_id_onto_the_stored_encoding():
    sent = forwarder().forward(stored({"kind": "new"}))
    assert sent is not None
    assert sent._encoded_fields is not None  # spliced, not encoded again
    assert (sent.id, sent.address, sent.durable, sent.body) == (0, "orders", True, b"body")
    assert sent.duplicate_id == b"producer-1"
    assert sent.headers == {"kind": "new", BRIDGE_PATH: "a", BRIDGE_DUPLICATE_ID: b"a:7"}
    assert decode_message(encode_message(sent)).headers == sent.headers


@given(
    st.dictionaries(st.text(max_size=10), st.text(max_size=10) | st.binary(max_size=10)),
    st.booleans(),
    st.integers(min_value=1, max_value=(1 << 63) - 1),
)
def test_a_first_hop_encodes_as_a_message_built_afresh(headers, durable, message_id):
    """The first hop's added headers are spliced from encodings worked out once: the
    forward's bytes are those of the same message built and encoded afresh."""
    headers = {k: v for k, v in headers.items() if not k.startswith("_TXB_")}
    sent = forwarder().forward(stored(headers, durable, message_id))
    assert sent is not None
    assert sent._encoded_fields is not None
    fresh = Message(0, "orders", durable, dict(sent.headers), b"body", b"producer-1")
    assert encode_message(sent) == encode_message(fresh)
    assert sent.size == fresh.size
    prefix = b"a:" if durable else b"a:run-1:"
    assert sent.headers[BRIDGE_DUPLICATE_ID] == prefix + b"%d" % message_id
    assert sent.headers[BRIDGE_PATH] == "a"


def test_a_non_durable_message_names_the_incarnation_and_the_forwarding_address_is_used():
    sent = forwarder(forwarding_address="elsewhere").forward(stored({}, durable=False))
    assert sent is not None
    assert sent.address == "elsewhere"
    assert sent.headers[BRIDGE_DUPLICATE_ID] == b"a:run-1:7"
    assert decode_message(encode_message(sent)).address == "elsewhere"


def test_a_second_hop_extends_the_path_and_replaces_the_duplicate_id():
    before = {"kind": "new", BRIDGE_PATH: "x", BRIDGE_DUPLICATE_ID: b"x:3", DELIVERY_COUNT: 2}
    sent = forwarder().forward(stored(before))
    assert sent is not None
    assert sent.headers == {
        "kind": "new",
        DELIVERY_COUNT: 2,
        BRIDGE_PATH: "x,a",
        BRIDGE_DUPLICATE_ID: b"a:7",
    }
    assert decode_message(encode_message(sent)).headers == sent.headers


def test_a_message_that_went_through_the_target_is_not_sent():
    assert forwarder().forward(stored({BRIDGE_PATH: "b,x"})) is None


def test_a_drain_counts_deliveries_and_leaves_a_producer_id_to_find_repeats():
    drain = forwarder(moving=True)
    sent = drain.forward(stored({BRIDGE_DUPLICATE_ID: b"x:3", DELIVERY_COUNT: 1}), 3)
    assert sent is not None
    assert sent.headers == {BRIDGE_PATH: "a", DELIVERY_COUNT: 3}
    assert decode_message(encode_message(sent)).headers == sent.headers


def test_without_duplicate_detection_no_duplicate_id_is_sent():
    sent = forwarder(duplicate_detection=False).forward(stored({BRIDGE_DUPLICATE_ID: b"x:3"}))
    assert sent is not None
    assert sent.headers == {BRIDGE_PATH: "a"}


def test_a_transformer_changes_the_message_or_drops_it():
    def transform(message: Message) -> Message | None:
        if message.headers.get("kind") == "drop":
            return None
        return Message(message.id, message.address, True, {"kind": "changed"}, b"new")

    changing = forwarder(transformer=transform)
    assert changing.forward(stored({"kind": "drop"})) is None
    sent = changing.forward(stored({"kind": "keep"}))
    assert sent is not None
    assert (sent.headers["kind"], sent.body) == ("changed", b"new")
    assert decode_message(encode_message(sent)).body == b"new"
