# SPDX-License-Identifier: MIT
"""A wsrvd of the tests' own (unique socket) serving two generated models:
"llama" (llama-mini, 8 heads, 2 KV heads, 2 layers) and "ds"
(deepseek-v3-mini, FP8 with block scales, 16 experts). meson test sets
WSRVD, WSRV_MKMODEL and WSRV_LIB to the build's."""

import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, PACKAGE)
sys.path.insert(0, os.path.join(PACKAGE, "examples"))
# The examples and the subprocesses import the package from the tree too.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE, os.environ.get("PYTHONPATH")]))


def _need(var):
    v = os.environ.get(var)
    if not v:
        pytest.exit(f"{var} is not set (meson test sets it)", returncode=2)
    return v


def _mkmodel(out, preset, size, layers, extra=()):
    subprocess.run([_need("WSRV_MKMODEL"), "--preset", preset, "--size", size, "--layers",
                    str(layers), "--out", str(out), *extra], check=True, stdout=subprocess.DEVNULL)
    return str(out)


class Server:
    def __init__(self, tmp, models, extra=()):
        self.sock = str(tmp / "wsrv.sock")
        self.log = open(tmp / "wsrvd.log", "w")
        args = [_need("WSRVD"), "--socket", self.sock, "--no-lock", "--hugepages", "off", *extra]
        for name, path in models.items():
            args += ["--model", f"{name}={path}"]
        self.models = models
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        # wsrvd serves while loading by default; unless a test asks for
        # that, it starts once every model is loaded.
        early = "--serve-while-loading" in extra
        for _ in range(1500):
            if self.proc.poll() is not None:
                raise RuntimeError(f"wsrvd exited: {open(tmp / 'wsrvd.log').read()}")
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(self.sock)
                s.close()
                if early or not self._loading():
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("wsrvd did not answer, or did not finish loading")

    def _loading(self):
        import wsrv

        with wsrv.connect(self.sock, name="pytest-ready") as c:
            return any(m["loading"] for m in c.models())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wsrv")
    models = {"llama": _mkmodel(tmp / "llama", "llama-mini", "64M", 2),
              "ds": _mkmodel(tmp / "ds", "deepseek-v3-mini", "40M", 2)}
    s = Server(tmp, models)
    yield s
    s.stop()


@pytest.fixture
def client(server):
    import wsrv

    with wsrv.connect(server.sock, name="pytest") as c:
        yield c


def open_fds():
    """This process's open fds, less the NVIDIA driver's device files."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                out.append(fd)
        except OSError:
            pass  # the listing's own fd, closed by now
    return len(out)


@pytest.fixture(scope="session", autouse=True)
def cuda_warm():
    """Where there is a GPU, CUDA is started before any test counts fds:
    the driver and torch open some (an eventfd, pipes, sockets) at their
    first use and keep them for the life of the process (seen on an H100:
    26 fds before test_cuda_stream, 55 after)."""
    import torch

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    yield


@pytest.fixture(autouse=True)
def no_fd_leak(cuda_warm):
    before = open_fds()
    yield
    import gc

    gc.collect()
    assert open_fds() <= before, "a test left file descriptors open"
