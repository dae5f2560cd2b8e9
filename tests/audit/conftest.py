"""One Spark session for the audit tests: local[2], two shuffle partitions, no UI, quiet.

Spark needs Java and PySpark. On a laptop without them the tests that need Spark skip and
say why; with ``CI`` set (CI runs the suite) they fail instead, so CI never passes by
skipping.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest


def spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[audit]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(java_home)):
        return "Java is not installed (Spark needs Java 17 or later)"
    return None


def require_spark() -> None:
    """Skip the calling test where Spark cannot run (no PySpark, no Java); fail on CI."""
    missing = spark_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark cannot run on CI: {missing}")
        pytest.skip(missing)


def require(module: str) -> ModuleType:
    """``module`` (of the audit extra), or a skip of the calling test module saying so
    (a failure on CI)."""
    if importlib.util.find_spec(module.partition(".")[0]) is None:
        reason = f"{module} is not installed (pip install -e '.[audit]')"
        if os.environ.get("CI"):
            pytest.fail(f"on CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    return importlib.import_module(module)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require_spark()
    from bridge.audit.pipeline import spark_session

    session = spark_session("local[2]", console_progress=False, app_name="txbridge tests")
    yield session
    session.stop()
