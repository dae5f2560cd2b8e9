"""``[ha]`` with the replication policies: Artemis's keys, the lease in PostgreSQL beside
an SQLite store, and what cannot work refused at start, naming the key."""

from __future__ import annotations

import pytest

from bridge.config.ha import HaPolicy, Replication
from bridge.config.node import load_node_config
from security.errors import ConfigError
from transport.urls import parse_url

NODE = '[node]\nname = "a"\ndata-dir = "var/a"\n'
REPLICATION = """\
[ha]
policy = "replication-backup"
lease-url = "postgresql://mq@db/lease"
peers = ["tcp://10.0.0.1:61616"]
cluster-user = "cluster"
cluster-password = "s3cret"
"""


def _load(tmp_path, text):
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_node_config(path).ha


def test_the_replication_keys_are_read(tmp_path):
    ha = _load(tmp_path, NODE + REPLICATION + 'initial-replication-sync-timeout = "5s"\n')
    assert ha.policy is HaPolicy.REPLICATION_BACKUP
    assert ha.url == "postgresql://mq@db/lease"
    peers = (parse_url("tcp://10.0.0.1:61616"),)
    assert ha.replication == Replication(peers, "cluster", "s3cret", 5.0)
    assert "s3cret" not in repr(ha)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (("lease-url", None), r"ha\.lease-url: is required unless \[cluster\] names"),
        (("peers", "peers = []"), r"ha\.peers: expected a non-empty list"),
        (("cluster-user", None), r"ha\.cluster-user: is required with replication"),
        (("lease-url", 'lease-url = "mysql://x"'), r"ha\.lease-url: expected a postgresql://"),
    ],
)
def test_what_replication_needs_is_named(tmp_path, change, error):
    key, line = change
    lines = [each for each in REPLICATION.splitlines() if not each.startswith(key)]
    text = NODE + "\n".join(lines + ([line] if line else [])) + "\n"
    with pytest.raises(ConfigError, match=error):
        _load(tmp_path, text)


def test_a_postgresql_store_is_shared_not_replicated(tmp_path):
    store = '[store]\ntype = "postgresql"\nurl = "postgresql://mq@db/broker"\n'
    with pytest.raises(ConfigError, match=r"ha\.policy: replication copies an SQLite store"):
        _load(tmp_path, NODE + store + REPLICATION)


def test_replication_keys_are_refused_with_a_shared_store(tmp_path):
    text = NODE + '[ha]\npolicy = "shared-store-primary"\npeers = ["tcp://h:1"]\n'
    with pytest.raises(ConfigError, match=r"ha\.peers: is for the replication policies"):
        _load(tmp_path, text)


def test_failback_is_the_primarys(tmp_path):
    primary = REPLICATION.replace("replication-backup", "replication-primary")
    ha = _load(tmp_path, NODE + primary + "allow-failback = true\nfailover-on-shutdown = false\n")
    assert (ha.replication.allow_failback, ha.replication.failover_on_shutdown) == (True, False)
    assert _load(tmp_path, NODE + REPLICATION).replication.failover_on_shutdown
    with pytest.raises(ConfigError, match=r"ha\.allow-failback: is the primary's"):
        _load(tmp_path, NODE + REPLICATION + "allow-failback = true\n")


def test_a_tls_peers_files_are_taken_from_the_files_folder(tmp_path):
    tls = 'peers = ["tls://10.0.0.1:61617?ca=certs/ca.pem"]'
    text = NODE + REPLICATION.replace('peers = ["tcp://10.0.0.1:61616"]', tls)
    (peer,) = _load(tmp_path, text).replication.peers
    assert peer.scheme == "tls"
    assert peer.options["ca"] == str(tmp_path / "certs" / "ca.pem")
    with pytest.raises(ConfigError, match=r"ha\.peers\[0\]: "):
        _load(tmp_path, NODE + REPLICATION.replace("tcp://10.0.0.1:61616", "http://x:1"))


@pytest.mark.parametrize("policy", ["replication-backup", "shared-store-backup"])
def test_a_backup_in_a_cluster_must_name_the_store_it_takes_over(tmp_path, policy):
    """Its live node's clients ask for that store by name: the backup's own name would
    leave them held and redirected nowhere after a failover."""
    path = tmp_path / "node.toml"
    ha = (
        'policy = "replication-backup"\npeers = ["tcp://127.0.0.1:1"]\n'
        'cluster-user = "cluster"\nlease-url = "postgresql://localhost/x"\n'
        if policy == "replication-backup"
        else 'policy = "shared-store-backup"\n'
    )
    base = (
        '[node]\nname = "b"\ndata-dir = "data"\n\n[security]\nenabled = false\n\n'
        f"[ha]\n{ha}\n"
        '[cluster]\nname = "c"\nuser = "cluster"\nmembers = ["tcp://127.0.0.1:2"]\n'
    )
    path.write_text(base, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"cluster\.store: is required with ha\.policy"):
        load_node_config(path)
    path.write_text(base + 'store = "a"\n', encoding="utf-8")
    assert load_node_config(path).cluster.store == "a"
