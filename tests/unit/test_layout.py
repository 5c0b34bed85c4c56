"""The suite's own layout: each test file in the folder of its kind, each kind a registered
marker, and unit tests kept from sockets and processes by the guard in tests/conftest.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import FOLDERS, KINDS, TESTS, NotAUnitTest


def test_every_test_file_sits_in_the_folder_of_one_kind() -> None:
    misplaced = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in KINDS
    ]
    assert misplaced == [], f"move them into {FOLDERS}"


def test_every_kind_folder_is_a_package() -> None:
    # Test modules then import as tests.<kind>.test_x, so two folders may hold the same name.
    assert [kind for kind in KINDS if not (TESTS / kind / "__init__.py").is_file()] == []


def test_every_kind_is_a_registered_marker_and_strict_markers_is_on() -> None:
    options = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]
    registered = {line.partition(":")[0] for line in options["markers"]}
    assert registered == set(KINDS)
    assert "--strict-markers" in options["addopts"].split()


def test_a_unit_test_that_connects_a_socket_fails() -> None:
    with pytest.raises(NotAUnitTest), socket.create_connection(("127.0.0.1", 9), timeout=1):
        pass


def test_a_unit_test_that_binds_a_socket_fails() -> None:
    with socket.socket() as server, pytest.raises(NotAUnitTest):
        server.bind(("127.0.0.1", 0))


def test_a_unit_test_that_starts_a_process_fails() -> None:
    with pytest.raises(NotAUnitTest):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
