"""The glibc allocator settings the agent applies to itself at start."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from agent import allocator

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt() is glibc's own"
)


@pytest.mark.integration
def test_both_settings_are_applied_when_the_environment_gives_neither() -> None:
    # In a child process: the settings last for the life of the process that applies them.
    code = "from agent import allocator; print(','.join(allocator.tune({})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "MALLOC_ARENA_MAX,MALLOC_MMAP_THRESHOLD_"


def test_a_setting_given_in_the_environment_is_left_to_glibc() -> None:
    environ = {"MALLOC_ARENA_MAX": "8", "MALLOC_MMAP_THRESHOLD_": "65536"}
    assert allocator.tune(environ) == []
