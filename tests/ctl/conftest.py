"""Fixtures the management and ``txbridge ctl`` tests share: a broker on a real store,
and its management API served on a loopback port, with security off or on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.node.broker import Broker
from tests.ctl.test_management import Served, open_broker, serving


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with open_broker(tmp_path) as opened:
        yield opened


@pytest.fixture
def served(broker: Broker, tmp_path: Path) -> Iterator[Served]:
    with serving(broker, tmp_path, security=False) as server:
        yield server


@pytest.fixture
def secured(broker: Broker, tmp_path: Path) -> Iterator[Served]:
    with serving(broker, tmp_path, security=True) as server:
        yield server
