"""Whether Spark can run here, for the audit tests (their session is the run's one,
``spark`` in tests/conftest.py: local[2], no UI, quiet).

Spark needs Java and PySpark. On a laptop without them the tests that need Spark skip and
say why; with ``CI`` set (CI runs the suite) they fail instead, so CI never passes by
skipping.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from types import ModuleType

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
