"""The scenario registry of ``txbridge bench``: what runs, and what says it cannot yet."""

from __future__ import annotations

import pytest

from benchmarks import scenarios
from bridge.ctl.main import main as txbridge


def test_without_a_scenario_the_usage_lists_them_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert txbridge(["bench"]) == 2
    usage = capsys.readouterr().err
    for name in ("node", "bridge", "large", "faults"):
        assert f"  {name} " in usage
    assert "not yet: needs core bridges (issue 6)" in usage


@pytest.mark.parametrize("name", ["bridge", "large", "faults"])
def test_a_scenario_not_built_yet_says_what_it_needs(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scenarios.main([name, "--messages", "10"]) == 2
    assert f"the {name} scenario needs core bridges (issue 6)" in capsys.readouterr().err


def test_the_node_scenario_has_the_common_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        txbridge(["bench", "node", "--help"])
    help_text = capsys.readouterr().out
    for option in ("--out", "--messages", "--size"):
        assert option in help_text
