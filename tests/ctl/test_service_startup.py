"""A start that fails where the preflight checks cannot see it (a store that will not
open) names the store's path, undoes itself, and creates nothing more."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.ctl.service import NodeService, StartupError
from bridge.store.sqlite import FILENAME
from tests.ctl.test_service import config


@pytest_twisted.ensureDeferred
async def test_a_store_that_cannot_be_opened_is_named_by_its_path(tmp_path):
    store = tmp_path / "data" / FILENAME
    store.mkdir(parents=True)  # a folder where the database file should be
    service = NodeService(config(tmp_path), reactor, exit_on_failure=False)
    service.startService()
    with pytest.raises(StartupError, match=rf"^the store {store}: "):
        await service.started
    await service.stopService()
    assert service.ports == {} and service.broker is None
