"""docs/protocol.md is the packet reference: it must say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

from bridge.protocol import PACKET_CLASSES, ErrorCode, PacketType
from bridge.protocol.codec import LAYOUTS

DOC = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()


def sections() -> dict[str, tuple[int, list[tuple[str, str]]]]:
    """Each packet section: its heading's frame type and its table's (field, encoding)."""
    found = {}
    for match in re.finditer(r"^### ([A-Z_]+) \((\d+)\)$(.*?)(?=^##)", DOC, re.M | re.S):
        rows = re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", match.group(3), re.M)
        found[match.group(1)] = (int(match.group(2)), rows)
    return found


def test_every_packet_is_documented_with_its_frame_type_fields_and_encodings():
    documented = sections()
    assert list(documented) == [cls.TYPE.name for cls in PACKET_CLASSES]
    for cls in PACKET_CLASSES:
        expected = [(name, wire.name) for name, wire in LAYOUTS[cls].fields]
        assert documented[cls.TYPE.name] == (cls.TYPE.value, expected), cls.TYPE.name


def test_the_frame_type_table_lists_every_type():
    rows = re.findall(r"^\| (\d+) \| ([A-Z_]+) \| (client|node) → (client|node) \|", DOC, re.M)
    assert [(int(number), name) for number, name, _, _ in rows] == [
        (member.value, member.name) for member in PacketType
    ]


def test_the_error_code_table_lists_every_code():
    table = DOC[DOC.index("Error codes (`ErrorCode`)") : DOC.index("## Frame types")]
    rows = re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", table, re.M)
    assert [(int(code), name) for code, name in rows] == [(c.value, c.name) for c in ErrorCode]


def test_the_python_example_runs():
    [example] = re.findall(r"^```python\n(.*?)^```", DOC, re.M | re.S)
    exec(compile(example, "docs/protocol.md", "exec"), {})
