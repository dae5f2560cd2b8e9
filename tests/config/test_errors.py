"""A bad configuration file is the operator's mistake, not a security refusal: whatever
reports refusals to a client (``except SecurityError``) must never swallow it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.config.node import load_node_config
from security import load_security
from security.errors import ConfigError, SecurityError


def _as_a_head_reports_refusals(call: Callable[[], object]) -> SecurityError | None:
    """What a protocol head does around a security call: a refusal becomes an answer to
    the client; anything else is not its business and propagates."""
    try:
        call()
    except SecurityError as refused:
        return refused
    return None


def test_a_bad_node_file_is_not_reported_as_a_refusal(tmp_path: Path):
    path = tmp_path / "node.toml"
    path.write_text('[node]\nname = "a"\ndata-dir = "var/a"\nsurprise = 1\n')
    with pytest.raises(ConfigError, match=r"node\.toml: node\.surprise"):
        _as_a_head_reports_refusals(lambda: load_node_config(path))


def test_a_bad_security_table_is_not_reported_as_a_refusal(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"security\.enabled"):
        _as_a_head_reports_refusals(
            lambda: load_security({"enabled": "yes"}, "node.toml", base_dir=tmp_path)
        )
