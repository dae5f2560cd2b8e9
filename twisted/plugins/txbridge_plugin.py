"""The twistd plugin: ``twistd -n txbridge --config node.toml`` runs a node."""

from __future__ import annotations

from bridge.ctl.twistd import ServiceMaker

txbridge = ServiceMaker()
