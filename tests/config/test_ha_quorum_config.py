"""``[ha]`` replication without ``lease-url``: the quorum vote's keys (Artemis's names), and
a pair that could never win a vote refused at start, naming the key and why."""

from __future__ import annotations

import pytest

from bridge.config.ha import QuorumVote
from bridge.config.node import load_node_config
from security.errors import ConfigError

NODE = '[node]\nname = "a"\ndata-dir = "var/a"\n'
PAIR = """\
[ha]
policy = "replication-primary"
peers = ["tcp://10.0.0.2:61616"]
cluster-user = "cluster"
"""
CLUSTER = """\
[cluster]
name = "eu"
user = "cluster"
members = ["tcp://10.0.0.3:61616", "tcp://10.0.0.4:61616", "tcp://10.0.0.5:61616"]
"""


def _load(tmp_path, text):
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_node_config(path).ha


def test_a_pair_without_a_lease_votes_with_artemis_defaults(tmp_path):
    ha = _load(tmp_path, NODE + PAIR + CLUSTER)
    assert ha.url is None
    assert ha.quorum == QuorumVote(False, None, 5.0)
    assert ha.quorum.needed(3) == 2
    assert "quorum vote" in ha.keeper


def test_the_quorum_keys_are_read(tmp_path):
    keys = 'vote-on-replication-failure = true\nquorum-size = 3\nquorum-vote-wait = "1500ms"\n'
    ha = _load(tmp_path, NODE + PAIR + keys + CLUSTER)
    assert ha.quorum == QuorumVote(True, 3, 1.5)
    assert ha.quorum.needed(3) == 3


@pytest.mark.parametrize(
    ("extra", "cluster", "error"),
    [
        ("", "", r"ha\.lease-url: is required unless \[cluster\] names the members"),
        ("quorum-size = 4\n", CLUSTER, r"ha\.quorum-size: 4 grants can never come from the 3"),
        ("quorum-size = 0\n", CLUSTER, r"ha\.quorum-size"),
        ('quorum-vote-wait = "0s"\n', CLUSTER, r"ha\.quorum-vote-wait: expected a duration"),
        ("vote-on-replication-failure = 1\n", CLUSTER, r"ha\.vote-on-replication-failure"),
        (
            "failover-on-shutdown = false\n",
            CLUSTER,
            r"ha\.failover-on-shutdown: false needs ha\.lease-url",
        ),
        ("", CLUSTER.replace('user = "cluster"', 'user = "other"'), r"ha\.cluster-user: expected"),
    ],
)
def test_a_pair_that_cannot_vote_is_refused(tmp_path, extra, cluster, error):
    with pytest.raises(ConfigError, match=error):
        _load(tmp_path, NODE + PAIR + extra + cluster)


def test_the_quorum_keys_are_not_for_a_leased_pair(tmp_path):
    text = NODE + PAIR + 'lease-url = "postgresql://mq@db/lease"\nquorum-size = 2\n' + CLUSTER
    with pytest.raises(ConfigError, match=r"ha\.quorum-size: is for a pair without ha\.lease-url"):
        _load(tmp_path, text)
