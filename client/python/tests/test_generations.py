# SPDX-License-Identifier: MIT
"""New generations from Python: a reload is announced to an attached
client, the old Model keeps its bytes, and attaching again gives the new
generation (the switch between passes)."""

import os
import select
import subprocess
import sys

import torch

import wsrv
from conftest import Server, _mkmodel
from st_reader import read_model


def test_reload_announced_and_switched(tmp_path):
    d = _mkmodel(tmp_path / "m", "llama-mini", "8M", 2)
    srv = Server(tmp_path, {"m": d})
    try:
        with wsrv.connect(srv.sock) as c:
            m = c.attach("m")
            old = m["model.embed_tokens.weight"].torch().clone()
            assert m.generation == 1
            # New weights of the same shapes, and a reload.
            subprocess.run([os.environ["WSRV_MKMODEL"], "--preset", "llama-mini", "--size", "8M",
                            "--layers", "2", "--seed", "9", "--out", d], check=True,
                           stdout=subprocess.DEVNULL)
            c.reload("m")
            r, _, _ = select.select([c.fileno()], [], [], 10)
            assert r, "no announcement within 10 s"
            assert c.poll_events() == 1
            assert (m.generation, m.latest_generation) == (1, 2)
            assert torch.equal(m["model.embed_tokens.weight"].torch(), old)
            m.close()
            with c.attach("m") as m2:
                assert m2.generation == 2
                new = read_model(d)["model.embed_tokens.weight"]
                assert torch.equal(m2.state_dict()["model.embed_tokens.weight"], new)
                assert not torch.equal(new, old)
    finally:
        srv.stop()
