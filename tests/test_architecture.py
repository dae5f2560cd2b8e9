"""docs/architecture.md stays the map of the code as it is: its table of imports is the
real import graph, its layers hold, its contracts are setup.cfg's, its seams list every
member of their interfaces, and every code path and link it names exists. The README
points at it, inside the repository."""

from __future__ import annotations

import ast
import configparser
import importlib
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from zope.interface.interface import InterfaceClass

from bridge.ha.failover import IFailoverPolicy
from bridge.heads.core.cluster import ICluster
from bridge.node.consumer import IStreamListener
from bridge.store.interfaces import IMessageStore
from security.interfaces import ISecurityAuth
from tests.processes import ROOT
from transport.interfaces import IFrameConnection, IFrameReceiver

MAP = (ROOT / "docs" / "architecture.md").read_text()
README = (ROOT / "README.md").read_text()
ROOTS = ("transport", "security", "bridge")


def _section(title: str) -> str:
    """The text under the heading ``title``, up to the next heading of its level or above."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", MAP, re.MULTILINE)
    assert match is not None, f"docs/architecture.md has no heading {title!r}"
    level = len(match.group(1))
    rest = MAP[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def _table(text: str) -> dict[str, str]:
    """The first column (one backticked name) of each row of ``text``'s table, with the
    rest of the row."""
    rows = re.findall(r"^\| `([^`]+)` \|(.*)\|$", text, re.MULTILINE)
    return dict(rows)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*ROOTS)


def _units(graph: grimp.ImportGraph) -> set[str]:
    """The parts the map names: the roots, bridge's children, and the heads."""
    children = graph.find_children("bridge") - {"bridge.heads"}
    return {"transport", "security", *children, *graph.find_children("bridge.heads")}


def _unit_of(module: str, units: set[str]) -> str | None:
    for unit in sorted(units, key=len, reverse=True):
        if module == unit or module.startswith(unit + "."):
            return unit
    return None


def _imports(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Each part's direct imports of other parts, as the code has them."""
    units = _units(graph)
    found: dict[str, set[str]] = {unit: set() for unit in units}
    for module in graph.modules:
        importer = _unit_of(module, units)
        if importer is None:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = _unit_of(imported, units)
            if target is not None and target != importer:
                found[importer].add(target)
    return found


def test_the_table_of_imports_is_the_import_graph(graph):
    table = _table(_section("Who imports whom"))
    documented = {
        unit: set() if rest.strip() == "nothing" else set(re.findall(r"`([^`]+)`", rest))
        for unit, rest in table.items()
    }
    assert documented == _imports(graph)


def test_every_package_imports_only_lower_rows(graph):
    rows = dict(re.findall(r"^row (\d+) +(.+)$", _section("Layers and imports"), re.MULTILINE))
    row_of = {name: int(row) for row, names in rows.items() for name in names.split()}
    units = _units(graph)
    assert units <= set(row_of), "every package stands in a row"
    for unit, imported in _imports(graph).items():
        higher = {target for target in imported if row_of[target] >= row_of[unit]}
        assert not higher, f"{unit} (row {row_of[unit]}) imports {higher}"


def test_the_contracts_are_setup_cfgs():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    prefix = "importlinter:contract:"
    declared = {section[len(prefix) :] for section in config if section.startswith(prefix)}
    assert set(_table(_section("The contracts"))) == declared


def test_no_sibling_packages_import_each_other():
    """The contracts the selector's move made true (bridge.config imported bridge.node's
    selector while bridge.node imported bridge.config)."""
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "lint-imports"),
            "--contract",
            "no-cycles-between-sibling-packages",
            "--contract",
            "selector-is-plain",
            "--contract",
            "config-knows-no-runtime",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def _reaches_into_the_broker(path: Path) -> list[str]:
    """Where ``path`` reads an underscored attribute off something named like a broker."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if "broker" in name.lower() and not node.attr.startswith("__"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}.{node.attr}")
    return found


def test_nothing_outside_the_node_reaches_into_the_broker():
    """Heads, bridges and the command line call the broker's public methods only (and
    import none of its parts: the ``node-is-called-through-the-broker`` contract)."""
    outside = [
        path
        for path in sorted((ROOT / "bridge").rglob("*.py"))
        if not path.is_relative_to(ROOT / "bridge" / "node")
    ]
    assert outside
    assert [hit for path in outside for hit in _reaches_into_the_broker(path)] == []


@pytest.mark.parametrize(
    "interface",
    [
        ICluster,
        IFailoverPolicy,
        IFrameConnection,
        IFrameReceiver,
        IMessageStore,
        ISecurityAuth,
        IStreamListener,
    ],
    ids=str,
)
def test_the_seams_list_every_member(interface: InterfaceClass):
    section = _section("The seams")
    missing = [name for name in interface.names() if not re.search(rf"`{name}\b", section)]
    assert not missing, f"{interface.__name__}: {missing}"


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def _built() -> str:
    """The map without its Planned section, which names what does not exist yet."""
    return MAP.replace(_section("Planned"), "")


def test_every_dotted_name_exists():
    names = set(re.findall(r"`((?:transport|security|bridge)(?:\.\w+)+)", _built()))
    assert names
    assert [name for name in sorted(names) if not _resolves(name)] == []


def test_every_path_and_link_exists():
    text = _built()
    paths = set(
        re.findall(r"`((?:transport|security|bridge|tests|benchmarks|twisted)/[^`]*)`", text)
    )
    paths |= set(re.findall(r"\bdocs/[\w-]+\.md\b", text))
    paths |= {
        "docs/" + link.split("#")[0]
        for link in re.findall(r"\]\(([^)#][^)]*)\)", text)
        if not link.startswith("http")
    }
    assert paths
    assert [path for path in sorted(paths) if not (ROOT / path).exists()] == []


def test_the_readme_points_at_the_map_inside_the_repository():
    assert "](docs/architecture.md)" in README
    assert "../" not in README
