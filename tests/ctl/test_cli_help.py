"""Every ``txbridge`` command's ``--help`` works, says what the command does and ends with
an example of it; ``txbridge --version`` prints the installed version. The commands are
found by walking the parser, so a new one is checked without being listed here."""

from __future__ import annotations

import subprocess
from importlib.metadata import version

import pytest

from bridge.ctl.main import build_parser, main, walk
from tests.system.nodes import BIN

COMMANDS = dict(walk(build_parser()))


def test_the_walk_finds_the_nested_commands():
    assert ("ctl", "bridge", "pause") in COMMANDS
    assert ("user", "add") in COMMANDS
    assert ("bench",) in COMMANDS


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda path: " ".join(path) or "txbridge")
def test_help_says_what_the_command_does_with_an_example(path, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr()
    assert shown.err == ""
    assert shown.out.startswith(f"usage: {' '.join(('txbridge', *path))} ")
    description = COMMANDS[path].description
    assert description, f"txbridge {' '.join(path)} has no description"
    assert " ".join(description.split()[:4]) in " ".join(shown.out.split())
    examples = shown.out.split("\nexample:\n", 1)[1].splitlines()
    assert examples, shown.out
    for line in examples:
        words = line.split()
        assert words[0] == "txbridge", line
        assert all(word in words for word in path), f"{line!r} is not an example of {path}"


def txbridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "txbridge"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_version_is_the_installed_distributions():
    done = txbridge("--version")
    assert done.returncode == 0, done
    assert done.stdout == f"txbridge {version('txbridge')}\n"


def test_bench_help_as_a_command():
    done = txbridge("bench", "--help")
    assert done.returncode == 0, done
    assert "txbridge bench node --out" in done.stdout
