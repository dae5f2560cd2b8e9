"""``txbridge cluster map``: the members' files in join order give the map every member
computes, printed as a table or JSON, offline; files that are not of one cluster, or a
policy whose map breaks the rules, are refused naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.config.cluster import machine_host_id
from bridge.ctl.main import main

HOSTS = {"a": "rack1", "b": "rack2", "c": "rack1", "d": "rack2"}


def node_file(
    tmp_path: Path,
    name: str,
    host_id: str | None = None,
    policy: str = "ring",
    cluster: str = "eu",
) -> Path:
    """A member's file, its core acceptor on a port of its own."""
    port = 61616 + "abcd".index(name[0])
    host = f'host-id = "{host_id}"\n' if host_id is not None else ""
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'[node]\nname = "{name}"\ndata-dir = "var/{name}"\n'
        f'[[acceptor]]\nname = "core"\nurl = "tcp://127.0.0.1:{port}"\n'
        f'[cluster]\nname = "{cluster}"\nuser = "node-link"\n'
        f'members = ["tcp://127.0.0.1:61616", "tcp://127.0.0.1:61617"]\n'
        f'failover-policy = "{policy}"\n{host}'
    )
    return path


def members(tmp_path: Path, policy: str = "ring") -> list[str]:
    return [str(node_file(tmp_path, n, HOSTS[n], policy)) for n in "abcd"]


def test_the_map_as_a_table(tmp_path, capsys):
    assert main(["cluster", "map", *members(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        "cluster eu, failover-policy ring, 4 member(s) in join order\n"
        "node  host   fails over to\n"
        "a     rack1  b, d\n"
        "b     rack2  c, a\n"
        "c     rack1  d, b\n"
        "d     rack2  a, c\n"
    )


def test_the_map_as_json(tmp_path, capsys):
    assert main(["cluster", "map", "--json", *members(tmp_path, "rendezvous")]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["cluster"] == "eu" and shown["failover_policy"] == "rendezvous"
    assert shown["members"][0] == {
        "node": "a",
        "host": "rack1",
        "host_defaulted": False,
        "urls": ["tcp://127.0.0.1:61616"],
        "failover": ["d", "b"],
    }
    assert [m["node"] for m in shown["members"]] == ["a", "b", "c", "d"]


def test_join_order_is_the_order_given(tmp_path, capsys):
    files = members(tmp_path)
    assert main(["cluster", "map", *reversed(files)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == [
        "d     rack2  c, a",
        "c     rack1  b, d",
        "b     rack2  a, c",
        "a     rack1  d, b",
    ]


def test_a_member_without_host_id_is_on_this_machine(tmp_path, capsys):
    files = [node_file(tmp_path, "a"), node_file(tmp_path, "b"), node_file(tmp_path, "c", "x")]
    assert main(["cluster", "map", *map(str, files)]) == 0
    out = capsys.readouterr().out
    here = machine_host_id()
    assert f"a     {here} (this machine's)  c\n" in out
    assert f"b     {here} (this machine's)  c\n" in out
    assert "c     x" in out and out.endswith("  a, b\n")


def test_one_member_has_nowhere_to_go(tmp_path, capsys):
    assert main(["cluster", "map", str(node_file(tmp_path, "a", "rack1"))]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "a     rack1  (nobody)"


def test_files_of_two_clusters_are_refused(tmp_path, capsys):
    a = node_file(tmp_path, "a", "rack1")
    b = node_file(tmp_path, "b", "rack2", cluster="us")
    assert main(["cluster", "map", str(a), str(b)]) == 2
    assert f"{b}: cluster.name: expected 'eu', as in {a}, got 'us'" in capsys.readouterr().err


def test_files_with_two_policies_are_refused(tmp_path, capsys):
    a = node_file(tmp_path, "a", "rack1")
    b = node_file(tmp_path, "b", "rack2", policy="rendezvous")
    assert main(["cluster", "map", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert f"{b}: cluster.failover-policy: expected 'ring', as in {a}, got 'rendezvous'" in err


def test_one_node_name_twice_is_refused(tmp_path, capsys):
    a = node_file(tmp_path, "a", "rack1")
    again = tmp_path / "again"
    again.mkdir()
    copy = node_file(again, "a", "rack2")
    assert main(["cluster", "map", str(a), str(copy)]) == 2
    assert f"{copy}: node.name: 'a' is the node name of an earlier file" in capsys.readouterr().err


def test_a_file_without_a_cluster_is_refused(tmp_path, capsys):
    path = tmp_path / "plain.toml"
    path.write_text('[node]\nname = "a"\ndata-dir = "var/a"\n')
    assert main(["cluster", "map", str(path)]) == 2
    assert f"{path}: cluster: is required" in capsys.readouterr().err


def test_a_bad_file_names_its_key(tmp_path, capsys):
    path = node_file(tmp_path, "a", "10.0.0.1")
    assert main(["cluster", "map", str(path)]) == 2
    assert "cluster.host-id: expected a machine id, not an address" in capsys.readouterr().err


def test_a_policy_whose_map_breaks_the_rules_is_refused(tmp_path, capsys):
    policy = "tests.ha.test_failover_policy:ListsItself"
    files = [node_file(tmp_path, n, HOSTS[n], policy) for n in "ab"]
    assert main(["cluster", "map", *map(str, files)]) == 1
    assert "a's list names 'a': not another member" in capsys.readouterr().err
