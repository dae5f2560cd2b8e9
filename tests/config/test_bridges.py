"""``[[bridge]]`` tables, in the node's file and in its bridges-dir: the issue's example
works as written, every key is read, every bad value names the file and key, and a bad
bridge file costs only its own bridges."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bridge.config.bridges import (
    BridgeConfig,
    LoadedBridges,
    load_bridge_file,
    load_bridges_dir,
    parse_bridge,
)
from bridge.config.node import all_bridges, load_node_config
from bridge.message import Message
from security.errors import ConfigError
from tests.processes import ROOT
from transport.urls import parse_url

EXAMPLE = """\
[[bridge]]
name = "a-to-b"
queue = "orders"                       # the local source queue (must exist; clear error if not)
target = "tcp://127.0.0.1:61617"       # or tls://...; a list of URLs means primary then backups
forwarding-address = "orders"          # default: the message's own address
filter = "region = 'eu'"               # optional, the node's selector language
transformer = "mypkg.module:function"  # optional, called with a message, returns a message
user = "bridge"
password = "secret"
confirmation-window-size = "1MiB"
producer-window-size = "1MiB"
retry-interval = "500ms"
retry-interval-multiplier = 2.0
max-retry-interval = "30s"
reconnect-attempts = -1                # -1: forever
use-duplicate-detection = true
concurrency = 1
"""

NODE = '[node]\nname = "a"\ndata-dir = "data"\n'
SOURCE = "bridges.d/x.toml"
MINIMAL = {"name": "b", "queue": "orders", "target": "tcp://h:1"}


def identity(message: Message) -> Message:
    return message


@pytest.fixture
def mypkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The issue example's ``mypkg.module:function``, importable, plus modules that fail."""
    package = tmp_path / "lib" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text("def function(message):\n    return message\n\nLIMIT = 3\n")
    (package / "broken.py").write_text("raise RuntimeError('no database')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    return package


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_the_issue_example_loads_as_written_in_the_node_file(tmp_path, mypkg):
    config = load_node_config(write(tmp_path / "node.toml", NODE + EXAMPLE))
    (bridge,) = config.bridges
    assert bridge.transformer is not None
    assert bridge.transformer.__module__ == "mypkg.module"
    assert bridge == BridgeConfig(
        name="a-to-b",
        queue="orders",
        targets=(parse_url("tcp://127.0.0.1:61617"),),
        source=str(tmp_path / "node.toml"),
        key="bridge[0]",
        forwarding_address="orders",
        filter="region = 'eu'",
        transformer_name="mypkg.module:function",
        user="bridge",
        password="secret",
        confirmation_window_size=1024 * 1024,
        producer_window_size=1024 * 1024,
        retry_interval=0.5,
        retry_interval_multiplier=2.0,
        max_retry_interval=30.0,
        reconnect_attempts=-1,
        use_duplicate_detection=True,
        concurrency=1,
    )
    assert config.bridges_dir is None
    assert all_bridges(config) == LoadedBridges(config.bridges)


def test_the_reference_shows_the_example_that_loads():
    reference = (ROOT / "docs" / "configuration.md").read_text()
    assert f"```toml\n{EXAMPLE}```" in reference


def test_the_defaults_are_artemis_s():
    bridge = parse_bridge(MINIMAL, SOURCE, "bridge[0]")
    assert bridge == BridgeConfig(
        name="b",
        queue="orders",
        targets=(parse_url("tcp://h:1"),),
        source=SOURCE,
        key="bridge[0]",
        forwarding_address=None,
        filter=None,
        transformer=None,
        transformer_name=None,
        user=None,
        password=None,
        confirmation_window_size=1024 * 1024,
        producer_window_size=1024 * 1024,
        min_large_message_size=100 * 1024,
        retry_interval=2.0,
        retry_interval_multiplier=1.0,
        max_retry_interval=2.0,
        reconnect_attempts=-1,
        use_duplicate_detection=True,
        concurrency=1,
        pending_ack_timeout=60.0,
    )


def test_every_other_key_and_value_form_is_read():
    bridge = parse_bridge(
        MINIMAL
        | {
            "target": ["tcp://primary:1", "tls://backup:2?ca=ca.pem"],
            "transformer": "tests.config.test_bridges:identity",
            "password": "",
            "confirmation-window-size": 65536,
            "producer-window-size": -1,
            "min-large-message-size": "1KiB",
            "retry-interval": "5s",
            "retry-interval-multiplier": 1,
            "reconnect-attempts": 0,
            "use-duplicate-detection": False,
            "concurrency": 4,
            "pending-ack-timeout": "1m",
        },
        SOURCE,
        "bridge[3]",
    )
    assert [str(url) for url in bridge.targets] == ["tcp://primary:1", "tls://backup:2"]
    assert bridge.targets[1].options == {"ca": "ca.pem"}
    assert bridge.transformer is identity
    assert bridge.transformer_name == "tests.config.test_bridges:identity"
    assert bridge.password == ""
    assert (bridge.confirmation_window_size, bridge.producer_window_size) == (65536, -1)
    assert bridge.min_large_message_size == 1024
    assert bridge.retry_interval_multiplier == 1.0
    assert (bridge.reconnect_attempts, bridge.use_duplicate_detection) == (0, False)
    assert (bridge.concurrency, bridge.pending_ack_timeout) == (4, 60.0)
    # Without max-retry-interval, the longest wait is at least the first one.
    assert (bridge.retry_interval, bridge.max_retry_interval) == (5.0, 5.0)
    assert "password" not in repr(bridge)


@pytest.mark.parametrize(
    ("changes", "key", "expected"),
    [
        ({"nme": "x"}, "nme", "unknown key (did you mean 'name'?); expected one of: concurrency"),
        ({"retry-intervall": "1s"}, "retry-intervall", "(did you mean 'retry-interval'?)"),
        ({"name": None}, "name", "is required"),
        ({"queue": None}, "queue", "is required"),
        ({"target": None}, "target", "is required"),
        ({"name": "a b"}, "name", "expected a name of letters, digits"),
        ({"name": 7}, "name", "expected a string, got an integer"),
        ({"queue": ""}, "queue", "expected a non-empty string"),
        ({"target": "http://h:1"}, "target", "scheme must be one of tcp, tls, got 'http'"),
        ({"target": "tcp://h"}, "target", "bad URL 'tcp://h': no port"),
        ({"target": "tcp://h:1?cert=c"}, "target", "unknown option 'cert'"),
        ({"target": []}, "target", "expected a URL or a non-empty array of URLs, got an empty"),
        ({"target": 5}, "target", "expected a URL or a non-empty array of URLs, got an integer"),
        ({"target": ["tcp://h:1", "udp://h:2"]}, "target[1]", "scheme must be one of"),
        ({"target": ["tcp://h:1", 2]}, "target[1]", "expected a string, got an integer"),
        ({"forwarding-address": ""}, "forwarding-address", "expected a non-empty string"),
        ({"filter": "region = "}, "filter", "at column 10: expected a value after '='"),
        ({"filter": 1}, "filter", "expected a string, got an integer"),
        ({"user": ["u"]}, "user", "expected a string, got an array"),
        ({"password": 1234}, "password", "expected a string, got an integer"),
        ({"confirmation-window-size": "lots"}, "confirmation-window-size", "a size such as"),
        ({"confirmation-window-size": 0}, "confirmation-window-size", "1 byte to below 4GiB"),
        ({"confirmation-window-size": "4GiB"}, "confirmation-window-size", "to below 4GiB"),
        ({"confirmation-window-size": -1}, "confirmation-window-size", "a size such as"),
        ({"producer-window-size": 0}, "producer-window-size", "expected -1 (what the target"),
        ({"producer-window-size": "2GiB"}, "producer-window-size", "1 byte to below 2GiB"),
        ({"producer-window-size": -2}, "producer-window-size", "(or -1 for no limit)"),
        ({"min-large-message-size": 0}, "min-large-message-size", "expected at least 1 byte"),
        ({"min-large-message-size": True}, "min-large-message-size", "got a boolean"),
        ({"retry-interval": 500}, "retry-interval", 'expected a duration such as "500ms"'),
        ({"retry-interval": "0s"}, "retry-interval", "expected a duration above zero"),
        ({"max-retry-interval": "soon"}, "max-retry-interval", "got 'soon'"),
        (
            {"retry-interval": "10s", "max-retry-interval": "5s"},
            "max-retry-interval",
            "expected at least retry-interval (10s), got 5s",
        ),
        (
            {"retry-interval-multiplier": 0.5},
            "retry-interval-multiplier",
            "a number of at least 1.0, got 0.5",
        ),
        ({"retry-interval-multiplier": "2"}, "retry-interval-multiplier", "got a string"),
        ({"retry-interval-multiplier": float("inf")}, "retry-interval-multiplier", "finite"),
        ({"reconnect-attempts": -2}, "reconnect-attempts", "at least -1, got -2"),
        ({"reconnect-attempts": 1.5}, "reconnect-attempts", "expected an integer, got a float"),
        ({"use-duplicate-detection": "yes"}, "use-duplicate-detection", "true or false"),
        ({"concurrency": 0}, "concurrency", "expected an integer of at least 1, got 0"),
        ({"pending-ack-timeout": "0ms"}, "pending-ack-timeout", "a duration above zero"),
        ({"transformer": "mypkg.module"}, "transformer", "expected 'package.module:function'"),
        ({"transformer": ":function"}, "transformer", "expected 'package.module:function'"),
        (
            {"transformer": "nowhere.at_all:f"},
            "transformer",
            "cannot import 'nowhere.at_all': ModuleNotFoundError: No module named 'nowhere'",
        ),
        (
            {"transformer": "mypkg.broken:f"},
            "transformer",
            "cannot import 'mypkg.broken': RuntimeError: no database",
        ),
        (
            {"transformer": "mypkg.module:missing"},
            "transformer",
            "module 'mypkg.module' has no 'missing'",
        ),
        (
            {"transformer": "mypkg.module:LIMIT"},
            "transformer",
            "'mypkg.module:LIMIT' is not callable (it is a int)",
        ),
    ],
)
def test_each_mistake_names_the_file_the_key_and_what_was_expected(mypkg, changes, key, expected):
    table = {k: v for k, v in (MINIMAL | changes).items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        parse_bridge(table, SOURCE, "bridge[2]")
    message = str(caught.value)
    assert message.startswith(f"{SOURCE}: bridge[2].{key}: "), message
    assert expected in message


def test_a_mistake_in_the_node_file_s_bridges_stops_loading(tmp_path):
    path = write(tmp_path / "node.toml", NODE + '[[bridge]]\nname = "b"\nqueue = "q"\n')
    with pytest.raises(ConfigError, match=r"node\.toml: bridge\[0\]\.target: is required"):
        load_node_config(path)
    twice = '[[bridge]]\nname = "b"\nqueue = "q"\ntarget = "tcp://h:1"\n'
    path = write(tmp_path / "node.toml", NODE + twice + twice)
    with pytest.raises(ConfigError, match=r"node\.toml: bridge\[1\]\.name: duplicate name 'b'"):
        load_node_config(path)
    path = write(tmp_path / "node.toml", 'bridge = "b"\n' + NODE)
    with pytest.raises(ConfigError, match=r"node\.toml: bridge: expected an array of tables"):
        load_node_config(path)


def bridge_table(name: str, queue: str = "orders", target: str = "tcp://127.0.0.1:61617") -> str:
    return f'[[bridge]]\nname = "{name}"\nqueue = "{queue}"\ntarget = "{target}"\n'


def test_the_bridges_dir_is_relative_to_the_node_file_and_its_bad_file_costs_only_its_own(
    tmp_path,
):
    node = write(
        tmp_path / "etc" / "node.toml",
        NODE.replace('data-dir = "data"', 'data-dir = "data"\nbridges-dir = "bridges.d"')
        + bridge_table("own"),
    )
    folder = tmp_path / "etc" / "bridges.d"
    write(folder / "b-good.toml", bridge_table("b1") + bridge_table("b2", queue="news"))
    write(folder / "a-bad-url.toml", bridge_table("a1") + bridge_table("a2", target="tcp://h"))
    write(folder / "c-unknown-key.toml", bridge_table("c1") + "retry-intervall = '1s'\n")
    write(folder / "d-not-toml.toml", "[[bridge]\n")
    write(folder / "e-other-table.toml", "[node]\nname = 'x'\n")
    write(folder / "f-repeats.toml", bridge_table("b2") + bridge_table("own") + bridge_table("f"))
    write(folder / "notes.txt", "not a bridge file")
    write(folder / ".g-hidden.toml", "not even TOML")
    config = load_node_config(node)
    assert config.bridges_dir == folder
    loaded = all_bridges(config)
    assert [(b.name, Path(b.source).name, b.key) for b in loaded.bridges] == [
        ("own", "node.toml", "bridge[0]"),
        ("b1", "b-good.toml", "bridge[0]"),
        ("b2", "b-good.toml", "bridge[1]"),
        ("f", "f-repeats.toml", "bridge[2]"),
    ]
    assert loaded.bridges[2].queue == "news"
    errors = [str(error).removeprefix(f"{folder}/") for error in loaded.errors]
    assert errors[0] == ("a-bad-url.toml: bridge[1].target: bad URL 'tcp://h': no port")
    assert errors[1].startswith(
        "c-unknown-key.toml: bridge[0].retry-intervall: unknown key "
        "(did you mean 'retry-interval'?)"
    )
    assert errors[2].startswith("d-not-toml.toml: is not valid TOML: ")
    assert errors[3].startswith("e-other-table.toml: node: unknown key; expected one of: bridge")
    assert errors[4:] == [
        f"f-repeats.toml: bridge[0].name: duplicate bridge name 'b2' "
        f"(first declared in {folder}/b-good.toml bridge[1])",
        f"f-repeats.toml: bridge[1].name: duplicate bridge name 'own' "
        f"(first declared in {node} bridge[0])",
    ]
    assert [(e.source, e.key) for e in loaded.errors][:2] == [
        (str(folder / "a-bad-url.toml"), "bridge[1].target"),
        (str(folder / "c-unknown-key.toml"), "bridge[0].retry-intervall"),
    ]


def test_a_missing_bridges_dir_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "bridges.d"
    loaded = load_bridges_dir(missing)
    assert loaded.bridges == ()
    assert [str(e) for e in loaded.errors] == [
        f"{missing}: cannot be read: No such file or directory"
    ]


def test_an_empty_bridge_file_has_no_bridges(tmp_path):
    assert load_bridge_file(write(tmp_path / "empty.toml", "# nothing yet\n")) == ()
    assert load_bridges_dir(tmp_path) == LoadedBridges()


def test_a_bridge_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[[bridge]]\nname = "caf\xe9"\n')
    assert [str(e) for e in load_bridges_dir(tmp_path).errors] == [f"{path}: is not UTF-8 text"]


def test_a_bridge_file_takes_relative_tls_files_from_its_own_folder(tmp_path):
    folder = tmp_path / "bridges.d"
    folder.mkdir()
    text = '[[bridge]]\nname = "x"\nqueue = "q"\ntarget = ["tls://h:1?ca=ca.pem&cert=c.pem"]\n'
    (bridge,) = load_bridge_file(write(folder / "x.toml", text))
    assert bridge.targets[0].options == {
        "ca": str(folder / "ca.pem"),
        "cert": str(folder / "c.pem"),
    }
