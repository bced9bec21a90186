"""A real small file system for the tests that fill a disk or need a read-only one: a tmpfs mounted as root.
Where mounting is not allowed (not root, no mount command, a sandbox that refuses), the test is skipped."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def mount(path, options):
    """Mount a tmpfs with ``options`` (e.g. ``"size=2m"``, ``"ro,size=1m"``) on the existing directory
    ``path``; returns ``path``. Skips the calling test where that is impossible."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here: {result.stdout.decode().strip()}")
    return path


def unmount(path):
    """Lazy unmount (a test that failed may still hold files open there)."""
    subprocess.run(["umount", "-l", str(path)], check=False)
