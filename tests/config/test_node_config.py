"""The node's configuration file: the documented example works as written, and every kind
of mistake names the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config.node import (
    AddressFullPolicy,
    AddressSettings,
    Routing,
    StoreSettings,
    StoreType,
    load_node_config,
    parse_node_config,
)
from bridge.ctl.service import stomp_settings
from security.errors import ConfigError

EXAMPLE = """\
[node]
name = "a"
data-dir = "var/a"

[[acceptor]]
name = "core"
url = "tcp://127.0.0.1:61616"
protocols = ["core"]

[[address]]
name = "orders"
routing = "anycast"            # anycast: one queue of the same name; multicast: a queue per sub
max-size-bytes = "64MiB"
address-full-policy = "PAGE"   # PAGE | BLOCK | FAIL | DROP

[management]
url = "http://127.0.0.1:8161"  # JSON status API and Prometheus /metrics

[security]
enabled = false
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_the_issue_example_loads_as_written(tmp_path):
    config = load_node_config(_write(tmp_path, EXAMPLE))
    assert config.name == "a"
    assert config.data_dir == tmp_path / "var" / "a"
    (acceptor,) = config.acceptors
    assert (acceptor.name, str(acceptor.url), acceptor.protocols) == (
        "core",
        "tcp://127.0.0.1:61616",
        ("core",),
    )
    assert acceptor.connection_ttl == 60.0
    assert acceptor.read_size == 64 * 1024
    assert acceptor.tcp_no_delay
    (address,) = config.addresses
    assert address.name == "orders"
    assert config.routing_for("orders") is Routing.ANYCAST
    settings = config.settings_for("orders")
    assert settings.max_size_bytes == 64 * 1024**2
    assert settings.address_full_policy is AddressFullPolicy.PAGE
    assert config.management is not None
    assert (config.management.host, config.management.port) == ("127.0.0.1", 8161)
    assert not config.security.enabled


def test_address_settings_merge_from_broadest_to_most_specific_then_the_address(tmp_path):
    config = load_node_config(
        _write(
            tmp_path,
            """\
[node]
name = "b"
data-dir = "/srv/b"

[[address-setting]]
match = "#"
max-size-bytes = "10MiB"
address-full-policy = "BLOCK"

[[address-setting]]
match = "metrics.#"
address-full-policy = "DROP"
id-cache-size = 500
auto-create-addresses = false
default-routing-type = "multicast"

[[address-setting]]
match = "metrics.cpu"
max-size-bytes = -1

[[address]]
name = "metrics.cpu"
id-cache-size = 7
""",
        ),
    )
    assert config.data_dir == Path("/srv/b")
    assert config.settings_for("orders") == AddressSettings(
        max_size_bytes=10 * 1024**2, address_full_policy=AddressFullPolicy.BLOCK
    )
    assert config.settings_for("metrics.disk") == AddressSettings(
        max_size_bytes=10 * 1024**2,
        address_full_policy=AddressFullPolicy.DROP,
        id_cache_size=500,
        auto_create_addresses=False,
        default_routing=Routing.MULTICAST,
    )
    assert config.settings_for("metrics.cpu") == AddressSettings(
        max_size_bytes=-1,
        address_full_policy=AddressFullPolicy.DROP,
        id_cache_size=7,
        auto_create_addresses=False,
        default_routing=Routing.MULTICAST,
    )
    assert config.routing_for("metrics.cpu") is Routing.MULTICAST
    assert config.routing_for("orders") is Routing.ANYCAST
    assert config.acceptors == ()
    assert config.management is None


def test_an_address_routing_is_one_type_or_a_list_of_both(tmp_path):
    path = _write(
        tmp_path,
        GOOD_HEAD
        + '[[address]]\nname = "feed"\nrouting = ["anycast", "multicast"]\n'
        + '[[address]]\nname = "news"\nrouting = ["multicast"]\n'
        + '[[address]]\nname = "orders"\nrouting = "anycast"\n',
    )
    config = load_node_config(path)
    both = {Routing.ANYCAST, Routing.MULTICAST}
    assert config.routing_types_for("feed") == both
    assert config.routing_for("feed") is Routing.ANYCAST  # what a send stating none gets
    assert config.routing_types_for("news") == {Routing.MULTICAST}
    assert config.routing_for("news") is Routing.MULTICAST
    assert config.routing_types_for("orders") == {Routing.ANYCAST}
    assert config.routing_types_for("undeclared") == {Routing.ANYCAST}


def test_stomp_large_bodies_stream_from_a_size_up_to_a_limit(tmp_path):
    path = _write(
        tmp_path,
        GOOD_HEAD
        + '[[acceptor]]\nname = "a"\nurl = "tcp://h:1"\nprotocols = ["stomp"]\n'
        + '[[acceptor]]\nname = "b"\nurl = "tcp://h:2"\nprotocols = ["stomp"]\n'
        + 'max-frame-size = "1MiB"\nstomp-min-large-message-size = "1MiB"\n'
        + 'stomp-max-message-size = "1GiB"\n',
    )
    defaults, tuned = load_node_config(path).acceptors
    limits = stomp_settings(defaults).limits
    assert (limits.max_body, limits.min_large, limits.max_large) == (4 << 20, 100 << 10, 128 << 20)
    limits = stomp_settings(tuned).limits
    assert (limits.max_body, limits.min_large, limits.max_large) == (1 << 20, 1 << 20, 1 << 30)


def test_declaration_order_of_settings_does_not_matter(tmp_path):
    entries = [
        '[[address-setting]]\nmatch = "a.#"\nid-cache-size = 1\n',
        '[[address-setting]]\nmatch = "a.b"\nid-cache-size = 2\n',
    ]
    for order in (entries, entries[::-1]):
        config = load_node_config(_write(tmp_path, GOOD_HEAD + "".join(order)))
        assert config.settings_for("a.b").id_cache_size == 2
        assert config.settings_for("a.c").id_cache_size == 1


GOOD_HEAD = '[node]\nname = "a"\ndata-dir = "d"\n'


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('[nod]\nname = "a"\n', "nod", "unknown key (did you mean 'node'?)"),
        ('[node]\nname = "a"\n', "node.data-dir", "is required"),
        ('[node]\nname = "a b"\ndata-dir = "d"\n', "node.name", "expected a name of letters"),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "http://h:1"\n',
            "acceptor[0].url",
            "scheme must be one of tcp, tls",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\nprotocols = ["amqp"]\n',
            "acceptor[0].protocols",
            "protocol names from core, stomp",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\nconnection-ttl = "soon"\n',
            "acceptor[0].connection-ttl",
            "expected a duration",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\n'
            '[[acceptor]]\nname = "x"\nurl = "tcp://h:2"\n',
            "acceptor[1].name",
            "duplicate name 'x'",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\nmax-frame-size = "10B"\n',
            "acceptor[0].max-frame-size",
            "at least 1KiB",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\nread-size = "1KiB"\n',
            "acceptor[0].read-size",
            "at least 4KiB and at most 16MiB",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\nread-size = "lots"\n',
            "acceptor[0].read-size",
            "expected a size such as",
        ),
        (
            GOOD_HEAD + '[[acceptor]]\nname = "x"\nurl = "tcp://h:1"\ntcp-no-delay = "yes"\n',
            "acceptor[0].tcp-no-delay",
            "expected true or false, got a string",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\nrouting = "broadcast"\n',
            "address[0].routing",
            "expected one of anycast, multicast, got 'broadcast'",
        ),
        (
            GOOD_HEAD
            + '[[acceptor]]\nname = "s"\nurl = "tcp://h:1"\nstomp-max-message-size = "1KiB"\n',
            "acceptor[0].stomp-max-message-size",
            "expected at least stomp-min-large-message-size",
        ),
        (
            GOOD_HEAD
            + '[[acceptor]]\nname = "s"\nurl = "tcp://h:1"\nstomp-min-large-message-size = 0\n',
            "acceptor[0].stomp-min-large-message-size",
            "expected at least 1 byte",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\nrouting = ["anycast", "topic"]\n',
            "address[0].routing[1]",
            "expected one of anycast, multicast, got 'topic'",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\nrouting = ["anycast", "anycast"]\n',
            "address[0].routing",
            "expected a list of distinct routing types",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\nrouting = []\n',
            "address[0].routing",
            "expected a list of distinct routing types (anycast, multicast), got []",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\nmax-size-bytes = "lots"\n',
            "address[0].max-size-bytes",
            "expected a size such as",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\naddress-full-policy = "page"\n',
            "address[0].address-full-policy",
            "expected one of PAGE, BLOCK, FAIL, DROP",
        ),
        (
            GOOD_HEAD + '[[address]]\nname = "o"\nauto-create-addresses = true\n',
            "address[0].auto-create-addresses",
            "unknown key",
        ),
        (
            GOOD_HEAD + '[[address-setting]]\nmax-size-bytes = "1MiB"\n',
            "address-setting[0].match",
            "is required",
        ),
        (
            GOOD_HEAD + '[[address-setting]]\nmatch = "#"\nid-cache-size = -3\n',
            "address-setting[0].id-cache-size",
            "at least 0",
        ),
        ('address = "orders"\n' + GOOD_HEAD, "address", "expected an array of tables"),
        (
            GOOD_HEAD + '[management]\nurl = "https://h:1"\n',
            "management.url",
            "expected http://HOST:PORT",
        ),
        (GOOD_HEAD + '[security]\nenabled = "yes"\n', "security.enabled", "expected true or false"),
    ],
)
def test_each_mistake_names_file_key_and_expectation(tmp_path, text, key, expected):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_node_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert expected in message


def test_a_file_that_is_not_toml_says_where(tmp_path):
    path = _write(tmp_path, '[node]\nname = "a\n')
    with pytest.raises(ConfigError, match=r"node.toml: is not valid TOML: .*line 2"):
        load_node_config(path)


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(ConfigError, match=r"nowhere\.toml: cannot be read: No such file"):
        load_node_config(tmp_path / "nowhere.toml")


def test_tls_file_options_are_relative_to_the_configuration_file(tmp_path):
    text = EXAMPLE.replace(
        'url = "tcp://127.0.0.1:61616"',
        'url = "tls://127.0.0.1:61616?cert=certs/node.pem&key=certs/node.key&ca=/etc/ca.pem"',
    ).replace(
        "[management]",
        '[[bridge]]\nname = "b"\nqueue = "orders"\n'
        'target = "tls://127.0.0.1:61617?ca=ca.pem"\n\n[management]',
    )
    config = load_node_config(_write(tmp_path, text))
    (acceptor,) = config.acceptors
    assert acceptor.url.options == {
        "cert": str(tmp_path / "certs" / "node.pem"),
        "key": str(tmp_path / "certs" / "node.key"),
        "ca": "/etc/ca.pem",
    }
    (bridge,) = config.bridges
    assert bridge.targets[0].options == {"ca": str(tmp_path / "ca.pem")}


def test_the_store_is_sqlite_unless_store_says_postgresql(tmp_path):
    assert load_node_config(_write(tmp_path, EXAMPLE)).store == StoreSettings()
    text = EXAMPLE + '\n[store]\ntype = "postgresql"\nurl = "postgresql://mq@db:5432/broker"\n'
    store = load_node_config(_write(tmp_path, text)).store
    assert (store.type, store.url) == (StoreType.POSTGRESQL, "postgresql://mq@db:5432/broker")
    assert store.bridge_confirm_wait == 0.05  # the default
    for wait, seconds in (('"0s"', 0.0), ('"200ms"', 0.2)):
        text = f"{EXAMPLE}\n[store]\nbridge-confirm-wait = {wait}\n"
        assert load_node_config(_write(tmp_path, text)).store.bridge_confirm_wait == seconds


@pytest.mark.parametrize(
    ("store", "error"),
    [
        ('type = "oracle"', r"store\.type: expected one of sqlite, postgresql, got 'oracle'"),
        ('type = "postgresql"', r"store\.url: is required"),
        ('type = "postgresql"\nurl = 5', r"store\.url: "),
        ('url = "postgresql://db/x"', r'store\.url: is only for type = "postgresql"'),
        ('type = "sqlite"\npath = "x"', r"store\.path"),
        ('bridge-confirm-wait = "11s"', r"store\.bridge-confirm-wait: at most 10s"),
        ("bridge-confirm-wait = 5", r"store\.bridge-confirm-wait: expected a duration"),
    ],
)
def test_store_mistakes_name_the_key(tmp_path, store, error):
    with pytest.raises(ConfigError, match=error):
        load_node_config(_write(tmp_path, f"{EXAMPLE}\n[store]\n{store}\n"))


def test_partial_frame_keys_default_and_parse(tmp_path):
    config = parse_node_config(
        {
            "node": {"name": "a", "data-dir": "d", "partial-frame-budget": "16MiB"},
            "acceptor": [
                {"name": "x", "url": "tcp://h:1"},
                {
                    "name": "y",
                    "url": "tcp://h:2",
                    "max-prelogin-frame-size": "8KiB",
                    "frame-timeout": "5s",
                },
                {"name": "z", "url": "tcp://h:3", "max-frame-size": "2KiB"},
            ],
        },
        tmp_path / "node.toml",
    )
    assert config.partial_frame_budget == 16 * 1024 * 1024
    x, y, z = config.acceptors
    assert (x.max_prelogin_frame_size, x.frame_timeout) == (64 * 1024, 30.0)
    assert (y.max_prelogin_frame_size, y.frame_timeout) == (8 * 1024, 5.0)
    assert z.max_prelogin_frame_size == 2 * 1024  # never above max-frame-size
    unlimited = parse_node_config(
        {"node": {"name": "a", "data-dir": "d", "partial-frame-budget": -1}}, tmp_path / "n.toml"
    )
    assert unlimited.partial_frame_budget == -1
