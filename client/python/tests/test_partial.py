# SPDX-License-Identifier: MIT
"""A partial server (wsrvd --plan P --ranks A-B --world W): Model.held()
says which ranks it loaded, a held rank's state_dict equals slicing the
files, and an unheld rank is refused with the ranks that are held."""

import json

import pytest
import torch

import wsrv
from conftest import Server
from st_reader import read_model
from test_state_dict import LLAMA_TP, expected


@pytest.fixture(scope="module")
def partial(server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("partial")
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({"tp_plan": LLAMA_TP}))
    s = Server(tmp, {"llama": server.models["llama"]},
               extra=("--plan", str(plan), "--ranks", "2-3", "--world", "4"))
    yield s
    s.stop()


def test_held_ranks(partial):
    ref = read_model(partial.models["llama"])
    with wsrv.connect(partial.sock) as c, c.attach("llama") as m:
        held = m.held()
        assert held["first"] == 2 and held["last"] == 3 and held["world"] == 4
        assert 0 < held["bytes"] < sum(t.nbytes for t in m.values())
        for rank in (2, 3):
            sd = m.state_dict({"tp_plan": LLAMA_TP}, rank, 4)
            for name, t in sd.items():
                want = expected(name, ref[name], rank, 4)
                assert torch.equal(t, want), name
        with pytest.raises(wsrv.WsrvError, match="loaded ranks 2-3 of 4"):
            m.state_dict({"tp_plan": LLAMA_TP}, 0, 4)
        q = m["model.layers.0.self_attn.q_proj.weight"]
        assert q.held == (q.nbytes // 2, q.nbytes // 2)


def test_whole_model_holds_everything(client):
    with client.attach("llama") as m:
        assert m.held() is None
        t = next(iter(m.values()))
        assert t.held == (0, t.nbytes)
