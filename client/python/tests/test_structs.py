# SPDX-License-Identifier: MIT
"""Every ctypes structure in wsrv/_lib.py against wsrv.h itself: a C
program made from the Python side's own field list (each field named by
its C name) is compiled against the build's header and prints sizeof and
every offsetof; the two must agree field for field. A field the header
does not have fails to compile; one moved, resized or left out fails the
comparison. Nothing else checks _lib.py's copies of the header."""

import ctypes
import os
import shutil
import subprocess

import pytest

from wsrv import _lib

# The Python name of each structure, and the C struct it copies.
C_NAMES = {
    "ConnectOpts": "wsrv_connect_opts", "TensorInfo": "wsrv_tensor", "HeldInfo": "wsrv_held",
    "LayerInfo": "wsrv_layer", "ModelInfo": "wsrv_model_info", "ServerStats": "wsrv_server_stats",
    "ModelStats": "wsrv_model_stats", "RegionInfo": "wsrv_region_info", "HostOpts": "wsrv_host_opts",
    "CudaOpts": "wsrv_cuda_opts", "StreamOpts": "wsrv_stream_opts", "StreamStats": "wsrv_stream_stats",
    "View": "wsrv_view", "Layout": "wsrv_layout", "ExpertStats": "wsrv_expert_stats",
    "Sharing": "wsrv_sharing", "ViewRow": "wsrv_view_row",
}


def _structures():
    return {n: getattr(_lib, n) for n in dir(_lib)
            if isinstance(getattr(_lib, n), type) and issubclass(getattr(_lib, n), ctypes.Structure)}


def test_every_structure_is_named():
    assert set(_structures()) == set(C_NAMES), "a ctypes structure without its C name here, or gone"


def _program():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "wsrv.h"', "int main(void)", "{"]
    for py, c in sorted(C_NAMES.items()):
        lines.append(f'\tprintf("{py} (sizeof) %zu\\n", sizeof(struct {c}));')
        for field, _ in getattr(_lib, py)._fields_:
            lines.append(f'\tprintf("{py} {field} %zu\\n", offsetof(struct {c}, {field}));')
    lines += ["\treturn 0;", "}"]
    return "\n".join(lines) + "\n"


def test_structures_match_the_header(tmp_path):
    header = os.environ.get("WSRV_HEADER")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not header or not os.path.exists(header) or not cc:
        pytest.skip("needs the build's wsrv.h ($WSRV_HEADER) and a C compiler")
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text(_program())
    subprocess.run([cc, "-std=gnu17", "-I", os.path.dirname(header), "-o", str(exe), str(src)],
                   check=True, capture_output=True)
    c = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        name, field, value = line.split()
        c[(name, field)] = int(value)
    for py in C_NAMES:
        cls = getattr(_lib, py)
        want = c[(py, "(sizeof)")]
        assert ctypes.sizeof(cls) == want, f"{py}: sizeof {ctypes.sizeof(cls)} here, {want} in wsrv.h"
        for field, _ in cls._fields_:
            got = getattr(cls, field).offset
            assert got == c[(py, field)], f"{py}.{field}: offset {got} here, {c[(py, field)]} in wsrv.h"
