"""Hosts of their own for partition tests: network namespaces, each joined to the test's
namespace by a veth pair, so that a test can cut one host off (``ip link set down``) while
its processes run. Needs root and iproute2: a test skips without them on a laptop, and
fails on CI (where they are given)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import pytest


def require_netns() -> None:
    """Skip the calling test where namespaces cannot be made; fail on CI."""
    missing = None
    if os.geteuid() != 0:
        missing = "network namespaces need root"
    elif shutil.which("ip") is None:
        missing = "network namespaces need iproute2's ip"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"on CI: {missing}")
        pytest.skip(missing)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@attrs.frozen
class Host:
    """One namespace: ``address`` is its own, ``gateway`` the test namespace's end of its
    link (where it reaches the test's listeners)."""

    netns: str
    link: str
    """The veth end in the test's namespace: cut it and the host is cut off."""
    address: str
    gateway: str

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def heal(self) -> None:
        _ip("link", "set", self.link, "up")


def _free_second_octet() -> int:
    """An x of 10.x.0.0/16, 200 to 249, that no route of this host uses yet (one left by a
    run cut off before its clean-up would make adding its routes fail)."""
    routes = subprocess.run(
        ["ip", "route", "show", "table", "all"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    used = {int(found) for found in re.findall(r"\b10\.(\d+)\.", routes)}
    free = [second for second in range(200, 250) if second not in used]
    if not free:
        pytest.fail("every 10.200-249.0.0/16 has a route already: remove what earlier runs left")
    return secrets.choice(free)


@contextmanager
def hosts(count: int) -> Iterator[list[Host]]:
    """``count`` namespaces, each on a /24 of its own in 10.x (x drawn per call among those
    no route uses), removed with their links afterwards whatever happened."""
    token = secrets.token_hex(3)
    second = _free_second_octet()
    made: list[Host] = []
    try:
        for index in range(count):
            netns = f"txb{token}{index}"
            outside, inside = f"tx{token}{index}o", f"tx{token}{index}i"
            host = Host(netns, outside, f"10.{second}.{index}.2", f"10.{second}.{index}.1")
            _ip("netns", "add", netns)
            made.append(host)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", netns)
            _ip("addr", "add", f"{host.gateway}/24", "dev", outside)
            _ip("link", "set", outside, "up")
            inner = ("netns", "exec", netns, "ip")
            _ip(*inner, "addr", "add", f"{host.address}/24", "dev", inside)
            _ip(*inner, "link", "set", inside, "up")
            _ip(*inner, "link", "set", "lo", "up")
            # with the link down its route goes: keep the host's addresses from leaking to
            # the default route (to whatever answers there), as a cut-off host is unreachable
            _ip("route", "add", "unreachable", f"10.{second}.{index}.0/24", "metric", "4242")
        yield made
    finally:
        for host in made:
            subnet = host.address.rsplit(".", 1)[0] + ".0/24"
            for undo in (
                ["netns", "del", host.netns],
                ["link", "del", host.link],
                ["route", "del", "unreachable", subnet, "metric", "4242"],
            ):
                subprocess.run(["ip", *undo], check=False, capture_output=True, timeout=30)
