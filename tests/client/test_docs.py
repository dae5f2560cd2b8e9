"""docs/client.md's Python examples are valid Python; the sans-IO one runs as written."""

from __future__ import annotations

import re

import pytest

from tests.processes import ROOT

DOC = (ROOT / "docs" / "client.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.DOTALL)


@pytest.mark.parametrize("block", BLOCKS)
def test_the_examples_compile(block: str):
    compile(block, "docs/client.md", "exec")


def test_the_sans_io_example_runs():
    [block] = [b for b in BLOCKS if "ClientSession(" in b]
    exec(compile(block, "docs/client.md", "exec"), {})
