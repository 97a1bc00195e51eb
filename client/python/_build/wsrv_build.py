# SPDX-License-Identifier: MIT
"""wsrv's build backend (PEP 517, PEP 660): a pure-Python wheel and sdist
made with the standard library alone, so that `pip install ./client/python`
works offline, in a venv with build isolation, where pip cannot fetch
setuptools. The version is the C library's: ../../meson.build in the tree,
PKG-INFO in an sdist."""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "wsrv"
SUMMARY = ("Attach to wsrvd's shared model weights: zero-copy numpy and torch views, layer streams, "
           "transformers models in one call")
TAG = "py3-none-any"
# Entry points: vLLM's plugin loader runs wsrv.vllm.register in every
# process of an engine, which registers --load-format wsrv.
ENTRY_POINTS = "[vllm.general_plugins]\nwsrv = wsrv.vllm:register\n"


def _version():
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


def _metadata():
    with open(os.path.join(HERE, "README.md")) as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\nSummary: {SUMMARY}\n"
            "License: MIT\nRequires-Python: >=3.9\nRequires-Dist: numpy\nProvides-Extra: torch\n"
            "Requires-Dist: torch; extra == \"torch\"\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _package_files():
    """(path in the wheel, path here) of the package: its .py files and py.typed."""
    pkg = os.path.join(HERE, NAME)
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py") or f == "py.typed":
            yield f"{NAME}/{f}", os.path.join(pkg, f)


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}\n"


def _dist_info():
    """(name of the dist-info folder, [(file in it, bytes)])."""
    return f"{NAME}-{_version()}.dist-info", [
        ("METADATA", _metadata().encode()),
        ("WHEEL", f"Wheel-Version: 1.0\nGenerator: wsrv_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()),
        ("top_level.txt", f"{NAME}\n".encode()),
        ("entry_points.txt", ENTRY_POINTS.encode())]


def _wheel(directory, files):
    """A wheel of files ((arc, bytes) pairs) and the dist-info."""
    dist, info = _dist_info()
    name = f"{NAME}-{_version()}-{TAG}.whl"
    meta = [(f"{dist}/{f}", data) for f, data in info]
    record = ""
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in list(files) + meta:
            z.writestr(arc, data)
            record += _record_line(arc, data)
        z.writestr(f"{dist}/RECORD", record + f"{dist}/RECORD,,\n")
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The dist-info alone (PEP 517); meson install puts the same one next
    to the package, so an installed wsrv is vLLM's plugin too."""
    dist, info = _dist_info()
    os.makedirs(os.path.join(metadata_directory, dist), exist_ok=True)
    for f, data in info:
        with open(os.path.join(metadata_directory, dist, f), "wb") as out:
            out.write(data)
    return dist


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(arc, _read(p)) for arc, p in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts this folder on sys.path: edits here take."""
    return _wheel(wheel_directory, [(f"__editable__.{NAME}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{_version()}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/wsrv_build.py"] + [
                os.path.relpath(p, HERE) for _, p in _package_files()]:
            t.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(info)
        t.addfile(ti, io.BytesIO(info))
    return name
