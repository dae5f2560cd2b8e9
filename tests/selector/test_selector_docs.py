"""docs/selectors.md tells the truth: its Python examples run, its error table is exact."""

from __future__ import annotations

import re

import pytest

from bridge.selector import SelectorError, compile_selector
from tests.processes import ROOT

DOC = (ROOT / "docs" / "selectors.md").read_text()


@pytest.mark.parametrize("block", re.findall(r"```python\n(.*?)```", DOC, re.DOTALL))
def test_the_examples_run(block: str):
    exec(compile(block, "docs/selectors.md", "exec"), {})


ERROR_ROWS = re.findall(r"^\| (`[^|]*`|\(empty\)) \| `(at column .*)` \|$", DOC, re.MULTILINE)


def test_the_error_table_has_its_rows():
    assert len(ERROR_ROWS) == 9


@pytest.mark.parametrize(("written", "message"), ERROR_ROWS)
def test_the_error_table(written: str, message: str):
    text = "" if written == "(empty)" else written.strip("`")
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    assert str(caught.value) == f'selector "{text}" {message}'
