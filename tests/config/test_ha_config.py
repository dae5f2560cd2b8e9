"""``[ha]``: ActiveMQ's keys, safe and fast defaults, and timings that could not fence in
time refused at start, naming the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config.ha import HaPolicy, HaSettings
from bridge.config.node import load_node_config
from security.errors import ConfigError

NODE = """\
[node]
name = "a"
data-dir = "var/a"
"""
STORE = '[store]\ntype = "postgresql"\nurl = "postgresql://mq@db:5432/broker"\n'


def _load(tmp_path: Path, text: str) -> HaSettings | None:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_node_config(path).ha


def test_no_ha_table_no_ha(tmp_path):
    assert _load(tmp_path, NODE + STORE) is None


def test_the_defaults_are_ping_1s_reap_5s_query_500ms(tmp_path):
    ha = _load(tmp_path, NODE + STORE + '[ha]\npolicy = "shared-store-backup"\n')
    assert ha == HaSettings(
        HaPolicy.BACKUP,
        "postgresql://mq@db:5432/broker",
        tmp_path / "var/a",
        1.0,
        5.0,
        0.5,
        max_clock_skew=1.0,
        critical_timeout=120.0,
    )


def test_every_key_is_read(tmp_path):
    text = (
        NODE
        + STORE
        + '[ha]\npolicy = "shared-store-primary"\nlease-ping-time = "2s"\n'
        + 'lease-reap-time = "10s"\nlease-query-timeout = "1500ms"\nmax-clock-skew = "250ms"\n'
        + 'critical-analyzer-timeout = "30s"\n'
    )
    ha = _load(tmp_path, text)
    assert ha is not None
    assert (ha.policy, ha.ping, ha.reap, ha.query_timeout, ha.max_clock_skew) == (
        HaPolicy.PRIMARY,
        2.0,
        10.0,
        1.5,
        0.25,
    )
    assert ha.critical_timeout == 30.0


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        # ActiveMQ's own defaults: a renewal every 30 s of a lease that lasts 10 s
        (
            'lease-ping-time = "30s"\nlease-reap-time = "10s"',
            r"ha\.lease-ping-time: must be below half of ha\.lease-reap-time \(10000ms\), "
            r"got 30000ms",
        ),
        (
            'lease-ping-time = "2500ms"\nlease-reap-time = "5s"',
            r"ha\.lease-ping-time: must be below half of ha\.lease-reap-time",
        ),
        # Artemis: a network timeout as long as the lease
        (
            'lease-query-timeout = "1s"',
            r"ha\.lease-query-timeout: must be below ha\.lease-ping-time \(1000ms\), got 1000ms",
        ),
        ('lease-reap-time = "0s"', r"ha\.lease-reap-time: expected a duration above zero"),
        ("lease-ping-time = 5", r"ha\.lease-ping-time: expected "),
        ('max-clock-skew = "soon"', r"ha\.max-clock-skew: expected "),
        # the reactor answers once per renewal: a bound below two pings stops healthy ones
        (
            'critical-analyzer-timeout = "1500ms"',
            r"ha\.critical-analyzer-timeout: must be at least twice ha\.lease-ping-time "
            r"\(1000ms\), got 1500ms",
        ),
        ('lease-time = "1s"', r"ha\.lease-time: unknown key \(did you mean 'lease-reap-time'"),
    ],
)
def test_timings_that_cannot_fence_in_time_are_refused_naming_the_key(tmp_path, keys, error):
    text = NODE + STORE + f'[ha]\npolicy = "shared-store-primary"\n{keys}\n'
    with pytest.raises(ConfigError, match=error):
        _load(tmp_path, text)


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ("", r"ha\.policy: is required"),
        ('policy = "replication"', r"ha\.policy: expected one of shared-store-primary, "),
    ],
)
def test_the_policy_is_required_and_checked(tmp_path, table, error):
    with pytest.raises(ConfigError, match=error):
        _load(tmp_path, NODE + STORE + f"[ha]\n{table}\n")


def test_ha_on_sqlite_keeps_a_file_lock_in_the_shared_store_directory(tmp_path):
    text = NODE + '[store]\ndata-dir = "/srv/shared"\n[ha]\npolicy = "shared-store-primary"\n'
    ha = _load(tmp_path, text)
    assert ha is not None
    assert (ha.url, ha.store_dir, ha.keeper) == (
        None,
        Path("/srv/shared"),
        "/srv/shared/live.lock",
    )


def test_without_a_store_directory_the_lock_is_in_the_node_data_directory(tmp_path):
    ha = _load(tmp_path, NODE + '[ha]\npolicy = "shared-store-backup"\n')
    assert ha is not None
    assert (ha.url, ha.store_dir) == (None, tmp_path / "var/a")


def test_a_store_directory_is_for_sqlite_only(tmp_path):
    with pytest.raises(ConfigError, match=r'store\.data-dir: is only for type = "sqlite"'):
        _load(tmp_path, NODE + STORE + 'data-dir = "shared"\n')
