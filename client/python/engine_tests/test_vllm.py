# SPDX-License-Identifier: MIT
"""vLLM (its CPU build, in the venv tools/vllm-venv makes) takes its
weights from wsrvd: the loader `wsrv` from a config-only directory gives
the default loader's greedy tokens; a config that is not wsrvd's model is
refused naming both; two engines at once: the host holds the weights
once, no engine keeps a mapping of them; a
trainer's publish moves a running engine to the new weights in place
(the tokens of a fresh engine on them), and a publish cut off before its
commit moves nothing. Each engine runs in a process of its own
(engine.py). Run by the meson test 'vllm' (tools/engine-tests)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, PACKAGE)

import wsrv  # noqa: E402


def need(var):
    v = os.environ.get(var)
    if not v:
        pytest.exit(f"{var} is not set (meson test sets it)", returncode=2)
    return v


def mkmodel(out, preset, size, layers, seed):
    subprocess.run([need("WSRV_MKMODEL"), "--preset", preset, "--size", size, "--layers", str(layers),
                    "--seed", str(seed), "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return str(out)


def config_only(model_dir, out):
    """A directory with the model's config.json and nothing else: the
    engine must open no weight file."""
    os.makedirs(out)
    shutil.copy(os.path.join(model_dir, "config.json"), out)
    return str(out)


class Wsrvd:
    def __init__(self, tmp, models):
        self.sock = str(tmp / "wsrv.sock")
        self.log = open(tmp / "wsrvd.log", "w")
        args = [need("WSRVD"), "--socket", self.sock, "--no-lock", "--hugepages", "off",
                "--allow-publish-uid", str(os.getuid())]
        for name, path in models.items():
            args += ["--model", f"{name}={path}"]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(3000):
            try:
                with wsrv.connect(self.sock, name="ready") as c:
                    if not any(m["loading"] for m in c.models()):
                        return
            except wsrv.WsrvError:
                pass
            assert self.proc.poll() is None, open(tmp / "wsrvd.log").read()
            time.sleep(0.02)
        raise RuntimeError("wsrvd did not load")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


class Engine:
    """engine.py in a process of its own, its first report read."""

    def __init__(self, model_dir, sock=None, name=None, script="engine.py"):
        args = [sys.executable, os.path.join(HERE, script), model_dir]
        if sock:
            args += ["--socket", sock, "--model", name]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.log = []
        self.first = self.read()

    def read(self):
        """The engine's next report; its log lines (vLLM's, on stdout and
        stderr) kept for a failure's message."""
        for line in self.proc.stdout:
            if line.startswith("WSRV-ENGINE "):
                return json.loads(line[len("WSRV-ENGINE "):])
            self.log.append(line)
        self.proc.wait()
        raise EngineFailed("".join(self.log))

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class EngineFailed(Exception):
    pass


def tokens_of(model_dir, sock=None, name=None):
    e = Engine(model_dir, sock, name)
    try:
        return e.first
    finally:
        e.close()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engines")
    m = {"a": mkmodel(tmp / "a", "llama-mini", "48M", 2, 11), "b": mkmodel(tmp / "b", "llama-mini", "48M", 2, 12),
         "other": mkmodel(tmp / "other", "llama-mini", "48M", 3, 13)}
    m["a_config"] = config_only(m["a"], tmp / "a-config")
    m["other_config"] = config_only(m["other"], tmp / "other-config")
    srv = Wsrvd(tmp, {"m": m["a"]})
    m["sock"] = srv.sock
    m["wsrvd_pid"] = srv.proc.pid
    yield m
    srv.stop()


@pytest.fixture(scope="module")
def fresh(models):
    """vLLM's default loader over each model's files: its first report
    (tokens, start to first token), made once."""
    return {k: tokens_of(models[k]) for k in ("a", "b")}


def test_wsrv_loader_gives_the_default_loaders_tokens(models, fresh):
    """From a directory with config.json alone, every weight from wsrvd:
    the greedy tokens of 24 steps for 3 prompts equal those of vLLM's own
    loader over the same files."""
    default = fresh["a"]
    served = tokens_of(models["a_config"], models["sock"], "m")
    assert served["tokens"] == default["tokens"]
    assert len(served["tokens"]) == 3 and all(len(t) == 24 for t in served["tokens"])
    print(f"start to first token: default {default['ready']:.2f} s, wsrv {served['ready']:.2f} s")


def test_a_config_not_wsrvds_model_is_refused_naming_both(models):
    with pytest.raises(EngineFailed) as e:
        tokens_of(models["other_config"], models["sock"], "m")
    said = str(e.value)
    assert "is not wsrvd's model 'm'" in said and "num_hidden_layers 3 against 2" in said, said[-3000:]
    assert models["other_config"] in said


def pss_of_wsrv_mappings(pid):
    """PSS (bytes) of the process's mappings of wsrvd's memfds."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                inside = len(head) >= 6 and "wsrv:" in line
            elif inside and head[0] == "Pss:":
                total += int(head[1]) * 1024
    return total


def descendants(pid):
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        for t in os.listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    pending += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return out


def wsrvd_segment_bytes(pid, name):
    """Host memory holding model name's segments: the pages allocated to
    wsrvd's memfds of it (every process maps these same pages)."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith(f"/memfd:wsrv:{name}:") and link.split(":")[3].split()[0].isdigit():
                total += os.stat(f"/proc/{pid}/fd/{fd}").st_blocks * 512
        except OSError:
            pass
    return total


def private_bytes(pid):
    """A process's memory of its own (smaps_rollup: private clean and dirty)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return sum(int(line.split()[1]) * 1024 for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))


def test_two_engines_hold_wsrvs_weights_once(models):
    """Two engines in processes of their own at once: the host holds the
    served weights once (wsrvd's memfd pages, which every process that
    maps them shares), no engine keeps a mapping of them once loaded (PSS
    0), and each engine's own parameters, copied from them by vLLM's
    weight loaders, are said."""
    with wsrv.connect(models["sock"]) as c, c.attach("m") as m:
        model_bytes = sum(m[n].nbytes for n in m)
    engines = [Engine(models["a_config"], models["sock"], "m") for _ in range(2)]
    try:
        held = wsrvd_segment_bytes(models["wsrvd_pid"], "m")
        procs = [[p for p in descendants(e.proc.pid) if os.path.exists(f"/proc/{p}")] for e in engines]
        mapped = sum(pss_of_wsrv_mappings(p) for ps in procs for p in ps)
        own = [sum(private_bytes(p) for p in ps) for ps in procs]
        params = [sum(e.first["param_bytes"]) for e in engines]
        print(f"the served weights in host memory: {held / model_bytes:.2f}x the model ({model_bytes} bytes), "
              f"mapped by the engines: {mapped} bytes (PSS); each engine's parameters: {params} bytes, "
              f"its processes' private memory: {own} bytes")
        assert model_bytes <= held <= 1.1 * model_bytes
        assert mapped == 0
        assert engines[0].first["tokens"] == engines[1].first["tokens"]
    finally:
        for e in engines:
            e.close()


def publish_from(sock, files, cut_off=False):
    """A trainer process publishes files' tensors as model m's next
    generation (the Python publish API); cut off: it is killed before its
    commit."""
    code = f"""
import os, signal, wsrv
from safetensors.torch import load_file
src = load_file({os.path.join(files, 'model.safetensors')!r})
with wsrv.connect({sock!r}, name="trainer") as c, c.attach("m") as m:
    p = m.publish()
    for n, t in src.items():
        p.write(n, t)
    if {cut_off!r}:
        os.kill(os.getpid(), signal.SIGKILL)
    print(p.commit())
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_a_publish_updates_a_running_engine(models, fresh):
    """A trainer publishes other weights; wsrv_update moves the running
    engine to them in place: its tokens are a fresh engine's on the new
    files (the long prompt's prefix cache is dropped with it). A publish
    cut off before its commit moves nothing."""
    fresh_b = fresh["b"]
    e = Engine(models["a_config"], models["sock"], "m")
    try:
        before = e.first["tokens"]
        cut = publish_from(models["sock"], models["b"], cut_off=True)
        assert cut.returncode == -signal.SIGKILL, cut.stderr
        same = e.ask("update")
        assert same["generations"] == [1]
        assert e.ask("tokens")["tokens"] == before
        done = publish_from(models["sock"], models["b"])
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "2"
        up = e.ask("update")
        assert up["generations"] == [2]
        assert e.ask("tokens")["tokens"] == fresh_b["tokens"]
        assert fresh_b["tokens"] != before
        print(f"update of a running engine: {up['seconds']:.3f} s")
    finally:
        e.close()


def test_a_request_running_during_an_update_finishes_on_its_weights(models, fresh):
    """An AsyncLLM (what vllm serve runs), updated with update_async while
    a request runs: the request finishes on the weights it began with (its
    tokens are the old generation's), and the next requests run on the new
    ones. (Runs after the update test: wsrvd serves b's bytes as
    generation 2, and a's are published as 3.)"""
    e = Engine(models["a_config"], models["sock"], "m", script="engine_async.py")
    try:
        assert e.first["before"] == 2
        done = publish_from(models["sock"], models["a"])  # generation 3, while the engine serves 2
        assert done.returncode == 0, done.stderr
        report = e.ask("go")
    finally:
        e.close()
    assert report["generations"] == [3], report
    assert report["inflight"] == fresh["b"]["tokens"][2]
    assert report["after"] == fresh["a"]["tokens"]
