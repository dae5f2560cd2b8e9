"""Private RabbitMQ nodes for the STOMP peers benchmark, beside any system one.

Each node runs Debian's ``rabbitmq-server`` script (``/usr/lib/rabbitmq/bin``, not the
``/usr/sbin`` wrapper, which switches to the ``rabbitmq`` user) with everything of its own:
node name, AMQP, STOMP and distribution ports (127.0.0.1, chosen free), an epmd this
module starts on its own port (the VM is told not to start one), mnesia and log folders,
a cookie (``HOME``), an enabled-plugins file (``rabbitmq_stomp`` and ``rabbitmq_shovel``)
and an empty ``rabbitmq-env.conf`` in place of the system's. Logs go to standard output,
where ``Server startup complete`` says the node is up. A node is stopped by the pid of
its VM (SIGTERM, then its launching script is reaped); epmd by its own pid.

For the A -> B case node A runs a static shovel (``advanced.config``) from its queue
``bench`` to node B's, confirming to the source once B has confirmed (``on_confirm``), at
the shovel's default prefetch.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

from benchmarks.node_throughput import BenchmarkError, Child
from benchmarks.runner import free_port

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
PLUGINS = ("rabbitmq_stomp", "rabbitmq_shovel")
QUEUE = "bench"
STARTED = r"Server startup complete"
SHOVEL_CONNECTED = r"Shovel a-to-b\): user \S+ authenticated"
"""Node B's log line once the shovel on A has connected to it."""
VHOST = "/"
"""The STOMP ``host`` header: RabbitMQ takes it as the virtual host."""


def missing() -> str | None:
    """Why private RabbitMQ nodes cannot run here, or None if they can."""
    if not SERVER.exists():
        return f"RabbitMQ is not installed ({SERVER} not found; Debian: rabbitmq-server)"
    if shutil.which("epmd") is None:
        return "epmd (Erlang) is not on PATH"
    plugins = Path("/usr/lib/rabbitmq/lib")
    for plugin in PLUGINS:
        if not any(plugins.glob(f"*/plugins/{plugin}-*")):
            return f"RabbitMQ's {plugin} plugin is not installed"
    return None


def _wait_listening(port: int, what: str, process: Child, deadline: float) -> None:
    """Until something accepts on 127.0.0.1:``port``; fails if ``process`` ends or at
    ``deadline``."""
    while True:
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return
        if process.process.poll() is not None:
            raise BenchmarkError(process.describe(f"exited before {what} listened"))
        if time.monotonic() >= deadline:
            raise BenchmarkError(f"{what} did not listen on port {port} in time")
        time.sleep(0.05)


def start_epmd(directory: Path, stack: ExitStack, deadline: float) -> int:
    """An epmd of our own on a free 127.0.0.1 port (stopped by pid on the way out)."""
    port = free_port()
    epmd = Child(
        "epmd",
        [str(shutil.which("epmd")), "-port", str(port), "-address", "127.0.0.1"],
        directory,
        directory / "epmd.stderr",
    )
    stack.callback(epmd.stop, signal.SIGTERM)
    _wait_listening(port, "epmd", epmd, deadline)
    return port


@dataclass
class RabbitNode:
    """A private node: its launching script, and its VM once the pid file names it."""

    name: str
    directory: Path
    script: Child
    amqp_port: int
    stomp_port: int
    stopped: bool = False

    @property
    def pid(self) -> int:
        """The VM's pid, from the pid file RabbitMQ writes as it starts."""
        return int((self.directory / "rabbitmq.pid").read_text().split()[0])

    def stop(self) -> None:
        """SIGTERM to the VM by its pid, then reap the script (which waits for the VM); if
        it does not end in time, SIGKILL both. Only once: the pid may be reused after."""
        if self.stopped:
            return
        self.stopped = True
        try:
            pid: int | None = self.pid
        except (OSError, ValueError, IndexError):
            pid = None
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        self.script.stop(signal.SIGTERM, timeout=60.0)
        if pid is not None and self.script.process.returncode == -signal.SIGKILL:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def shovel_config(target_port: int) -> str:
    """``advanced.config``: a static shovel from this node's queue ``bench`` (``amqp://``:
    a direct connection inside the node) to the one on ``target_port`` (both declared
    durable, as RabbitMQ's STOMP ``/queue/`` makes them)."""
    declare = f"[{{'queue.declare', [{{queue, <<\"{QUEUE}\">>}}, durable]}}]"
    return f"""[{{rabbitmq_shovel, [{{shovels, [
  {{'a-to-b', [
    {{source, [{{protocol, amqp091}},
              {{uris, ["amqp://"]}},
              {{declarations, {declare}}},
              {{queue, <<"{QUEUE}">>}}]}},
    {{destination, [{{protocol, amqp091}},
                   {{uris, ["amqp://127.0.0.1:{target_port}"]}},
                   {{declarations, {declare}}},
                   {{publish_fields, [{{exchange, <<"">>}}, {{routing_key, <<"{QUEUE}">>}}]}}]}},
    {{ack_mode, on_confirm}},
    {{reconnect_delay, 1}}]}}]}}]}}].
"""


def start_node(
    name: str,
    directory: Path,
    stack: ExitStack,
    deadline: float,
    epmd_port: int,
    *,
    advanced: str = "[].\n",
) -> RabbitNode:
    """A private node named ``name`` in ``directory``, returned once it has started;
    stopped by pid on the way out."""
    directory.mkdir(parents=True, exist_ok=True)
    amqp_port, stomp_port, dist_port = free_port(), free_port(), free_port()
    (directory / "rabbitmq.conf").write_text(
        f"listeners.tcp.1 = 127.0.0.1:{amqp_port}\n"
        f"stomp.listeners.tcp.1 = 127.0.0.1:{stomp_port}\n"
        "log.console = true\n"
        "log.console.level = info\n"
        "log.file = false\n"
    )
    (directory / "advanced.config").write_text(advanced)
    (directory / "enabled_plugins").write_text(f"[{','.join(PLUGINS)}].\n")
    (directory / "rabbitmq-env.conf").write_text("")
    env = {
        "HOME": str(directory),
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODENAME": f"txbridge-bench-{name}-{os.getpid()}@localhost",
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_CONF_ENV_FILE": str(directory / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(directory / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
        "RABBITMQ_LOG_BASE": str(directory / "log"),
        "RABBITMQ_LOGS": "-",
        "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": (
            "-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false"
        ),
    }
    script = Child(f"RabbitMQ {name}", [str(SERVER)], directory, directory / "stderr", env)
    node = RabbitNode(name, directory, script, amqp_port, stomp_port)
    stack.callback(node.stop)
    script.until(STARTED, deadline)
    return node
