"""MESSAGE frames: the STOMP 1.2 head written from a template is byte for byte what
``serialize`` writes of the frame ``message_frame`` builds, and it is used whenever no
header needs an escape."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bridge.heads.stomp.frames import Version, serialize
from bridge.heads.stomp.headers import AckMode
from bridge.heads.stomp.message_frames import message_frame, message_head
from bridge.heads.stomp.subscriptions import Subscription
from bridge.message import Message

_PLAIN = st.text(st.characters(blacklist_characters="\\\r\n:", codec="utf-8"), max_size=12)
_ANY = st.text(st.characters(codec="utf-8"), max_size=12)
_VALUES = st.one_of(_ANY, st.integers(-(2**63), 2**63 - 1), st.booleans(), st.binary(max_size=8))


def _subscription(sub_id: str, destination: str, ack: AckMode, key: int) -> Subscription:
    return Subscription(sub_id, key, ack=ack, destination=destination, address="a")


def _case(texts: st.SearchStrategy[str], values: st.SearchStrategy[object]) -> st.SearchStrategy:
    return st.tuples(
        st.builds(
            _subscription, texts, texts, st.sampled_from(list(AckMode)), st.integers(0, 10**6)
        ),
        st.integers(0, 10**9),
        st.integers(1, 1000),
        st.builds(
            Message,
            st.integers(0, 2**63 - 1),
            st.just("a"),
            st.booleans(),
            st.dictionaries(texts, values, max_size=4),
            st.binary(max_size=64),
        ),
    )


def _serialized(
    subscription: Subscription, delivery_id: int, count: int, message: Message
) -> bytes:
    body = message.body
    frame = message_frame(
        subscription, delivery_id, count, message, Version.V1_2, body=body, size=len(body)
    )
    return b"".join(serialize(frame, Version.V1_2))


@given(_case(_ANY, _VALUES))
def test_a_head_from_the_template_is_the_serialized_frames(case) -> None:
    subscription, delivery_id, count, message = case
    head = message_head(subscription, delivery_id, count, message)
    if head is not None:
        assert head + message.body + b"\0" == _serialized(subscription, delivery_id, count, message)


@given(_case(_PLAIN, st.one_of(_PLAIN, st.integers(), st.booleans())))
def test_headers_that_need_no_escape_take_the_template(case) -> None:
    subscription, delivery_id, count, message = case
    head = message_head(subscription, delivery_id, count, message)
    assert head is not None
    assert head + message.body + b"\0" == _serialized(subscription, delivery_id, count, message)


def test_a_header_that_needs_an_escape_takes_the_frame() -> None:
    plain = _subscription("s", "/queue/a", AckMode.AUTO, 1)
    message = Message(7, "a", True, {"note": "a:b"}, b"x")
    assert message_head(plain, 1, 1, message) is None
    assert message_head(plain, 1, 1, Message(7, "a", True, {"note": "ab"}, b"x")) is not None
    named = _subscription("s:1", "/queue/a", AckMode.AUTO, 1)
    assert message_head(named, 1, 1, Message(7, "a", True, {}, b"x")) is None


def test_only_a_redelivery_says_so_and_counts_its_deliveries() -> None:
    """A first delivery carries neither ``redelivered`` nor ``delivery-count`` (ActiveMQ
    Classic sends ``redelivered:true`` only on a redelivery): two headers fewer for every
    client to parse. A redelivery carries both, in the template and in the frame."""
    auto = _subscription("s", "/queue/a", AckMode.AUTO, 1)
    message = Message(7, "a", True, {}, b"x")
    first = message_head(auto, 1, 1, message)
    assert first == (
        b"MESSAGE\nsubscription:s\nmessage-id:7\ndestination:/queue/a\ncontent-length:1\n"
        b"persistent:true\n\n"
    )
    again = message_head(auto, 2, 3, message)
    assert again is not None and b"\nredelivered:true\ndelivery-count:3\n" in again
    for count in (1, 3):
        frame = message_frame(auto, 1, count, message, Version.V1_0, body=b"x", size=1)
        names = [name for name, _ in frame.headers]
        assert ("redelivered" in names, "delivery-count" in names) == (count > 1,) * 2
