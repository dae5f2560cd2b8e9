"""What the twistd plugin offers: options (``--config``) and the node service.

A configuration error is a usage error: twistd prints it (file, key, what was expected)
and exits before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.application.service import IServiceMaker
from twisted.plugin import IPlugin
from twisted.python import usage
from zope.interface import implementer

from bridge.config.node import load_node_config
from bridge.ctl.service import NodeService
from security.errors import ConfigError


class Options(usage.Options):
    optParameters = [["config", "c", None, "The node's configuration file (TOML)."]]

    def postOptions(self) -> None:
        path = self["config"]
        if path is None:
            raise usage.UsageError("--config is required: the node's configuration file")
        try:
            self["node"] = load_node_config(Path(path))
        except ConfigError as error:
            raise usage.UsageError(str(error)) from None


@implementer(IServiceMaker, IPlugin)
class ServiceMaker:
    tapname = "txbridge"
    description = "A txbridge node: durable queues, the core protocol, management."
    options = Options

    def makeService(self, options: Options) -> NodeService:
        # Imported here, not above: twistd installs the reactor it was asked for after
        # loading plugins, and importing the default one earlier would preempt that.
        from twisted.internet import reactor  # noqa: PLC0415

        node: Any = options["node"]
        return NodeService(node, reactor, reload_on_hangup=True)
