"""Connection URLs: what parses, and what each malformed one is told."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transport.errors import URLError
from transport.tls import TLSConfig
from transport.urls import parse_url


def test_tcp_and_tls_urls():
    url = parse_url("tcp://127.0.0.1:61616")
    assert (url.scheme, url.host, url.port, dict(url.options)) == ("tcp", "127.0.0.1", 61616, {})
    assert str(url) == "tcp://127.0.0.1:61616"
    six = parse_url("tls://[::1]:0?ca=ca.pem")
    assert (six.host, six.port, six.is_tls) == ("::1", 0, True)
    assert str(six) == "tls://[::1]:0"


def test_tls_options_override_the_configured_ones():
    url = parse_url("tls://h:1?cert=a.pem&key=a.key&verify-client=true&server-name=node-a")
    base = TLSConfig(ca=Path("ca.pem"), cert=Path("old.pem"))
    assert url.tls_config(base) == TLSConfig(
        cert=Path("a.pem"),
        key=Path("a.key"),
        ca=Path("ca.pem"),
        verify_client=True,
        server_name="node-a",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http://h:1", "scheme must be one of tcp, tls, got 'http'"),
        ("h:1", "scheme must be one of tcp, tls"),
        ("tcp://:1", "no host"),
        ("tcp://h", "no port"),
        ("tcp://h:99999", "Port out of range"),
        ("tcp://h:x", "bad URL 'tcp://h:x'"),
        ("tcp://h:1/path", "only scheme://host:port?options"),
        ("tcp://user:pw@h:1", "only scheme://host:port?options"),
        ("tcp://h:1?cert=a", "unknown option 'cert' (known for tcp: connect-timeout-millis)"),
        ("tls://h:1?colour=red", "unknown option 'colour' (known for tls: cert, key, ca"),
        ("tcp://h:1?connect-timeout-millis=0", "connect-timeout-millis='0': expected a whole"),
        ("tcp://h:1?connect-timeout-millis=1.5", "connect-timeout-millis='1.5': expected"),
        ("tls://h:1?connect-timeout-millis=-2", "connect-timeout-millis='-2': expected"),
        ("tls://h:1?verify-client=maybe", "verify-client='maybe': expected true or false"),
        ("tls://h:1?ca", "malformed options 'ca'"),
    ],
)
def test_malformed_urls_say_what_is_wrong(text, message):
    with pytest.raises(URLError) as caught:
        parse_url(text)
    assert message in str(caught.value)


def test_a_url_may_bound_each_connection_attempt():
    assert parse_url("tcp://h:1").connect_timeout == 30.0
    assert parse_url("tcp://h:1?connect-timeout-millis=2500").connect_timeout == 2.5
    tls = parse_url("tls://h:1?ca=ca.pem&connect-timeout-millis=100")
    assert tls.connect_timeout == 0.1 and str(tls) == "tls://h:1"


@given(st.text(max_size=60))
def test_any_text_parses_or_raises_url_error(text):
    with contextlib.suppress(URLError):
        parse_url(text)


def test_relative_file_options_are_taken_from_the_configuration_folder():
    url = parse_url("tls://h:1?cert=certs/node.pem&key=/etc/node.key&server-name=n")
    based = url.relative_to(Path("/srv/txbridge"))
    assert based.options == {
        "cert": "/srv/txbridge/certs/node.pem",
        "key": "/etc/node.key",
        "server-name": "n",
    }
    assert (based.scheme, based.host, based.port) == ("tls", "h", 1)
    assert based.tls_config().cert == Path("/srv/txbridge/certs/node.pem")
