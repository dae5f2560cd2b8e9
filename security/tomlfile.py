"""Reading a TOML file with errors that name the file; writing one atomically."""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from security.errors import ConfigError


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The parsed table in ``path``, or ConfigError naming the file and the problem."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(str(path), "", f"the {what} does not exist") from None
    except OSError as error:
        raise ConfigError(str(path), "", f"cannot read the {what}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(str(path), "", f"the {what} is not valid TOML: {error}") from None


def write_toml_atomically(path: Path, data: Mapping[str, Any], header: str = "") -> None:
    """Replace ``path`` with ``data`` in one rename, readable by its owner only."""
    text = header + tomli_w.dumps(data)
    directory = path.parent if str(path.parent) else Path()
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
