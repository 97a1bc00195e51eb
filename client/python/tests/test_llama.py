# SPDX-License-Identifier: MIT
"""The example Llama decoder on wsrv's weights: logits bit-identical to the
same module on weights read independently from the files, resident or
streamed; tensor parallel over gloo (W = 2 and 4, one process per rank, all
attached to the same wsrvd) within an fp32 tolerance, with the same greedy
tokens."""

import os
import socket
import subprocess
import sys

import torch

import llama
import wsrv
from st_reader import read_model

EXAMPLE = os.path.join(os.path.dirname(llama.__file__), "llama.py")
PROMPT, N = [1, 2, 3], 8
# fp32 sums in another order (the all-reduce): relative to the largest logit.
TOLERANCE = 1e-5


def reference(server):
    w = read_model(server.models["llama"])
    with wsrv.connect(server.sock) as c, c.attach("llama") as m:
        cfg = m.config
    return llama.generate(llama.Config(cfg), llama.DictWeights(w), PROMPT, N)


def test_bit_identical_resident_and_streamed(server, client):
    ids, logits = reference(server)
    with client.attach("llama") as m:
        c = llama.Config(m.config)
        got_ids, got = llama.generate(c, llama.DictWeights(m.state_dict()), PROMPT, N)
        assert got_ids == ids
        assert all(torch.equal(a, b) for a, b in zip(got, logits))
        with m.stream("host", slots=2) as s:
            got_ids, got = llama.generate(c, llama.StreamWeights(s), PROMPT, N)
            assert s.stats()["passes"] == N
        assert got_ids == ids and all(torch.equal(a, b) for a, b in zip(got, logits))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(server, world, out, extra=()):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, WORLD_SIZE=str(world), RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, EXAMPLE, "--socket", server.sock, "--model", "llama",
             "--prompt-ids", ",".join(map(str, PROMPT)), "--tokens", str(N),
             "--save-logits", str(out), *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e
    return outs[0][0]


def test_tensor_parallel(server, tmp_path):
    ids, logits = reference(server)
    ref = torch.stack(logits)
    for world in (2, 4):
        out = run_ranks(server, world, tmp_path / f"tp{world}.pt")
        got = torch.load(tmp_path / f"tp{world}.pt")
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        print(f"W={world}: largest logit difference {err:.2e} of the largest logit")
        assert err < TOLERANCE, err
        assert f"ids {','.join(map(str, ids))}" in out


def test_cli_prints_ids_and_digest(server):
    r = subprocess.run([sys.executable, EXAMPLE, "--socket", server.sock, "--model", "llama",
                        "--prompt-ids", "1,2,3", "--tokens", "4", "--stream"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0].startswith("ids ") and len(lines[0].split(",")) == 4
    assert lines[1].startswith("logits ") and len(lines[1]) == len("logits ") + 16
