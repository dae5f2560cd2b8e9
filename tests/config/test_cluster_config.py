"""``[cluster]``: a name, the cluster user (the security store's, when security is on),
the static members, the failover policy (imported when the file is read) and the host
id, a machine id; every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config.cluster import ClusterSettings, machine_host_id
from bridge.config.node import load_node_config
from bridge.ha.failover import RendezvousPolicy, RingPolicy
from security.errors import ConfigError
from transport.urls import parse_url

NODE = '[node]\nname = "a"\ndata-dir = "var/a"\n'
CLUSTER = """\
[cluster]
name = "eu"
user = "node-link"
members = ["tcp://10.0.0.1:61616", "tcp://10.0.0.2:61616", "tcp://10.0.0.3:61616"]
"""
MEMBERS = CLUSTER.splitlines()[3]


def _load(tmp_path: Path, text: str) -> ClusterSettings | None:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_node_config(path).cluster


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, text)
    return str(refused.value)


def test_no_cluster_table_no_cluster(tmp_path):
    assert _load(tmp_path, NODE) is None


def test_the_defaults_ring_and_the_machines_host_id(tmp_path):
    cluster = _load(tmp_path, NODE + CLUSTER)
    assert cluster is not None
    assert (cluster.name, cluster.user, cluster.password) == ("eu", "node-link", None)
    assert cluster.members == tuple(parse_url(f"tcp://10.0.0.{n}:61616") for n in (1, 2, 3))
    assert cluster.policy_name == "ring"
    assert isinstance(cluster.failover_policy, RingPolicy)
    assert cluster.host_id is None
    assert cluster.own_host_id() == machine_host_id()


def test_every_key_is_read(tmp_path):
    text = (
        NODE
        + CLUSTER
        + 'password = "s3cret"\nfailover-policy = "rendezvous"\nhost-id = "rack1-box4"\n'
    )
    cluster = _load(tmp_path, text)
    assert cluster is not None
    assert cluster.password == "s3cret"
    assert "s3cret" not in repr(cluster)
    assert isinstance(cluster.failover_policy, RendezvousPolicy)
    assert cluster.policy_name == "rendezvous"
    assert cluster.host_id == cluster.own_host_id() == "rack1-box4"


def test_a_policy_of_ones_own(tmp_path):
    spec = "tests.ha.test_failover_policy:ReversedPolicy"
    cluster = _load(tmp_path, NODE + CLUSTER + f'failover-policy = "{spec}"\n')
    assert cluster is not None
    assert type(cluster.failover_policy).__name__ == "ReversedPolicy"
    assert cluster.policy_name == spec


def test_member_tls_files_are_taken_from_the_files_folder(tmp_path):
    text = NODE + CLUSTER.replace(
        '"tcp://10.0.0.3:61616"', '"tls://10.0.0.3:61617?ca=certs/ca.pem"'
    )
    cluster = _load(tmp_path, text)
    assert cluster is not None
    assert cluster.members[2] == parse_url(f"tls://10.0.0.3:61617?ca={tmp_path / 'certs/ca.pem'}")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('name = "eu"\n', "", "cluster.name: is required"),
        ('name = "eu"', 'name = "e u"', "cluster.name: expected a name of letters"),
        ('user = "node-link"\n', "", "cluster.user: is required"),
        (MEMBERS, "members = []", "cluster.members: expected a non-empty array"),
        (MEMBERS, "members = 1", "array of member URLs, got an integer"),
        ('"tcp://10.0.0.2:61616"', '"http://10.0.0.2"', "cluster.members[1]: bad URL"),
        ('"tcp://10.0.0.3:61616"', '"tcp://10.0.0.1:61616"', "cluster.members[2]: "),
    ],
)
def test_required_keys_and_members(tmp_path, old, new, message):
    assert message in _refused(tmp_path, NODE + CLUSTER.replace(old, new))


def test_a_member_twice_is_refused(tmp_path):
    text = NODE + CLUSTER.replace('"tcp://10.0.0.3:61616"', '"tcp://10.0.0.1:61616"')
    assert "cluster.members[2]: 'tcp://10.0.0.1:61616' is already member 0" in _refused(
        tmp_path, text
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("nmae = 1\n", "cluster.nmae: unknown key (did you mean 'name'?)"),
        (
            'failover-policy = "rings"\n',
            "cluster.failover-policy: expected 'ring', 'rendezvous' "
            "or 'package.module:Class', got 'rings'",
        ),
        (
            'failover-policy = "tests.ha.test_failover_policy:NotAPolicy"\n',
            "cluster.failover-policy: 'tests.ha.test_failover_policy:NotAPolicy' is not a class "
            "that implements IFailoverPolicy",
        ),
        (
            'failover-policy = "no_such_module:Policy"\n',
            "cluster.failover-policy: cannot import 'no_such_module'",
        ),
        ("failover-policy = 1\n", "cluster.failover-policy: expected a string, got an integer"),
        ('host-id = "10.0.0.1"\n', "cluster.host-id: expected a machine id, not an address"),
        ('host-id = "fe80::1"\n', "cluster.host-id: expected a name"),
        ('host-id = ""\n', "cluster.host-id: expected a non-empty string"),
        ("password = 5\n", "cluster.password: expected a string, got an integer"),
    ],
)
def test_bad_values_name_their_key(tmp_path, extra, message):
    assert message in _refused(tmp_path, NODE + CLUSTER + extra)


SECURITY = '[security]\nenabled = true\nusers-file = "users.toml"\n'


def test_with_security_on_the_user_is_the_security_stores_cluster_user(tmp_path):
    text = NODE + SECURITY + 'cluster-user = "node-link"\n' + CLUSTER
    cluster = _load(tmp_path, text)
    assert cluster is not None and cluster.user == "node-link"


@pytest.mark.parametrize(
    ("security", "message"),
    [
        (
            SECURITY,
            "cluster.user: security is enabled, so [security] cluster-user must name "
            "'node-link' too: the members log in to each other as the cluster user",
        ),
        (
            SECURITY + 'cluster-user = "admin"\n',
            "cluster.user: expected [security] cluster-user, 'admin', got 'node-link'",
        ),
    ],
)
def test_with_security_on_another_user_is_refused(tmp_path, security, message):
    assert message in _refused(tmp_path, NODE + security + CLUSTER)


def test_with_security_off_any_user_will_do(tmp_path):
    cluster = _load(tmp_path, NODE + "[security]\nenabled = false\n" + CLUSTER)
    assert cluster is not None and cluster.user == "node-link"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("4f3c2a9be1d04e0fa7d1c2b3a4e5f601\n", "4f3c2a9be1d04e0fa7d1c2b3a4e5f601"),
        ("", "box-7"),
        ("uninitialized\n", "box-7"),
        (None, "box-7"),
    ],
)
def test_the_machines_host_id_is_its_machine_id_else_its_host_name(tmp_path, content, expected):
    machine_id = tmp_path / "machine-id"
    if content is not None:
        machine_id.write_text(content)
    assert machine_host_id(machine_id, lambda: "box-7") == expected


def test_how_members_link_and_clients_are_held(tmp_path):
    default = _load(tmp_path, NODE + CLUSTER)
    assert default is not None
    assert (default.store, default.retry_interval, default.hold_timeout) == (None, 0.5, 15.0)
    text = NODE + CLUSTER + 'store = "a"\nretry-interval = "250ms"\nconnect-hold-timeout = "4s"\n'
    cluster = _load(tmp_path, text)
    assert cluster is not None
    assert (cluster.store, cluster.retry_interval, cluster.hold_timeout) == ("a", 0.25, 4.0)


def test_how_long_a_drain_waits_for_its_target(tmp_path):
    default = _load(tmp_path, NODE + CLUSTER)
    assert default is not None and default.drain_target_timeout == 15.0
    cluster = _load(tmp_path, NODE + CLUSTER + 'drain-target-timeout = "2s"\n')
    assert cluster is not None and cluster.drain_target_timeout == 2.0


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('store = "a b"', "cluster.store"),
        ('retry-interval = "0s"', "cluster.retry-interval"),
        ("connect-hold-timeout = 3", "cluster.connect-hold-timeout"),
        ('drain-target-timeout = "0s"', "cluster.drain-target-timeout"),
    ],
)
def test_bad_link_and_hold_keys_are_named(tmp_path, line, key):
    assert key in _refused(tmp_path, NODE + CLUSTER + line + "\n")
