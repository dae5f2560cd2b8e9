"""Private ActiveMQ Classic brokers for the STOMP peers benchmark (Debian's ``activemq``
package, installed by ``scripts/install-activemq``).

Each broker is one ``java -jar /usr/share/activemq/bin/activemq.jar start`` process run
from its own folder: its own ``activemq.xml`` (KahaDB in that folder, JMX off, an OpenWire
and a STOMP transport connector on 127.0.0.1 port 0), a log4j configuration printing to
standard output, and the JVM options of Debian's package (``ACTIVEMQ_OPTS`` in
``/usr/share/activemq/activemq-options``: a 512 MiB heap) - its defaults. The broker's log
names the ports it bound and says when it has started. For the A -> B case broker A has a
network connector to B's OpenWire port, and B's log says when that bridge is up. A broker
is stopped by its pid (SIGTERM, then SIGKILL if it does not end in time).
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from benchmarks.node_throughput import Child

HOME = Path("/usr/share/activemq")
JAR = HOME / "bin" / "activemq.jar"
OPTIONS = HOME / "activemq-options"
DEFAULT_OPTS = "-Xms512M -Xmx512M -Dorg.apache.activemq.UseDedicatedTaskRunner=true"
"""Debian's ACTIVEMQ_OPTS, should its options file not say."""
STARTED = r"Apache ActiveMQ \S+ \((\S+), .*\) started"
LISTENING = re.compile(r"Listening for connections at: (\w+)://[^:]+:(\d+)")
BRIDGED = r"Network connection between .* has been established"
JAVA_OPENS = (
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.net=ALL-UNNAMED",
)
"""What Debian's ``/usr/bin/activemq`` opens to the broker on Java 9 and later."""
LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%5p | %m%n
"""


def missing() -> str | None:
    """Why private ActiveMQ brokers cannot run here, or None if they can."""
    if not JAR.exists():
        return (
            "ActiveMQ Classic is not installed "
            f"({JAR} not found; as root run scripts/install-activemq)"
        )
    if shutil.which("java") is None:
        return "java is not on PATH"
    return None


def jvm_options() -> list[str]:
    """Debian's ACTIVEMQ_OPTS for the broker's JVM (heap size and task runner)."""
    if OPTIONS.exists():
        for line in OPTIONS.read_text().splitlines():
            if line.startswith("ACTIVEMQ_OPTS="):
                return shlex.split(line.split("=", 1)[1].strip().strip("\"'"))
    return shlex.split(DEFAULT_OPTS)


def broker_xml(name: str, data: Path, network_to: int | None = None) -> str:
    """``activemq.xml``: broker ``name`` keeping its KahaDB in ``data``, OpenWire and STOMP
    on 127.0.0.1 port 0, and a network connector to 127.0.0.1:``network_to`` if given."""
    network = (
        "<networkConnectors>"
        f'<networkConnector name="a-to-b" uri="static:(tcp://127.0.0.1:{network_to})"/>'
        "</networkConnectors>"
        if network_to is not None
        else ""
    )
    return f"""<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans.xsd
    http://activemq.apache.org/schema/core
    http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="{name}" useJmx="false"
          dataDirectory="{data}">
    <persistenceAdapter><kahaDB directory="{data}/kahadb"/></persistenceAdapter>
    {network}
    <transportConnectors>
      <transportConnector name="openwire" uri="tcp://127.0.0.1:0"/>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:0"/>
    </transportConnectors>
  </broker>
</beans>
"""


@dataclass
class Broker:
    """A running private broker: its JVM process and the ports it bound."""

    name: str
    process: Child
    openwire_port: int
    stomp_port: int

    @property
    def pid(self) -> int:
        return self.process.pid


def start_broker(
    name: str, directory: Path, stack: ExitStack, deadline: float, network_to: int | None = None
) -> Broker:
    """A private broker ``name`` in ``directory``, returned once started; stopped by pid
    on the way out."""
    conf, data = directory / "conf", directory / "data"
    for folder in (conf, data, directory / "tmp"):
        folder.mkdir(parents=True, exist_ok=True)
    (conf / "activemq.xml").write_text(broker_xml(name, data, network_to))
    (conf / "log4j.properties").write_text(LOG4J)
    argv = [
        str(shutil.which("java")),
        *jvm_options(),
        *JAVA_OPENS,
        f"-Djava.io.tmpdir={directory / 'tmp'}",
        f"-Dactivemq.classpath={conf}",
        f"-Dactivemq.home={HOME}",
        f"-Dactivemq.base={directory}",
        f"-Dactivemq.conf={conf}",
        f"-Dactivemq.data={data}",
        "-jar",
        str(JAR),
        "start",
        f"xbean:file:{conf / 'activemq.xml'}",
    ]
    process = Child(f"ActiveMQ {name}", argv, directory, directory / "stderr")
    stack.callback(process.stop, signal.SIGTERM)
    ports: dict[str, int] = {}
    while "stomp" not in ports or "tcp" not in ports:
        found = process.until(LISTENING, deadline)
        ports[found.group(1)] = int(found.group(2))
    process.until(STARTED, deadline)
    return Broker(name, process, ports["tcp"], ports["stomp"])
