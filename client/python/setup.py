# SPDX-License-Identifier: MIT
"""The version for pyproject.toml's dynamic field: the C library's, from
the tree's meson.build; in an sdist, from its PKG-INFO."""
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    meson = os.path.join(HERE, "..", "..", "meson.build")
    if os.path.exists(meson):
        with open(meson) as f:
            m = re.search(r"project\([^)]*?version:\s*'([^']+)'", f.read(), re.S)
        if m:
            return m.group(1)
    with open(os.path.join(HERE, "PKG-INFO")) as f:
        for line in f:
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    raise RuntimeError("wsrv: no version: neither ../../meson.build nor PKG-INFO")


setup(version=version())
