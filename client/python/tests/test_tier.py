# SPDX-License-Identifier: MIT
"""A model with a disk tier (wsrvd --memory-budget): a tensor on
a layer not mapped raises WsrvError, never faults; Model.wait(layer) maps
it, and a stream reads every layer with the bytes of the files."""

import errno

import pytest
import torch

import wsrv

from conftest import Server, _mkmodel
from st_reader import read_model


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tier")
    s = Server(tmp, {"m": _mkmodel(tmp / "m", "llama-mini", "16M", 8)}, extra=("--memory-budget", "8M"))
    yield s
    s.stop()


def test_unmapped_layer_raises_then_wait_maps(tiered):
    ref = read_model(tiered.models["m"])
    with wsrv.connect(tiered.sock, name="pytest-tier") as c, c.attach("m") as m:
        name = "model.layers.6.mlp.down_proj.weight"
        with pytest.raises(wsrv.WsrvError) as e:
            m.tensor(name).torch()
        assert e.value.errno == errno.EAGAIN and "disk tier" in str(e.value)
        m.wait(6)
        assert torch.equal(m.tensor(name).torch(), ref[name])


def test_stream_reads_every_layer(tiered):
    ref = read_model(tiered.models["m"])
    with wsrv.connect(tiered.sock, name="pytest-tier") as c, c.attach("m") as m, \
            m.stream("host", slots=1) as s:
        for _ in range(2):
            for layer in s:
                for name, t in layer.items():
                    assert torch.equal(t, ref[name]), name


def test_state_dict_names_the_calls_then_layers(tiered):
    """Issue 48 item 15: state_dict() of a tiered model failed at once with
    a bare EAGAIN. It names the calls to use; state_dict(layers=[...])
    maps those layers and returns their tensors, each the files' bytes."""
    ref = read_model(tiered.models["m"])
    with wsrv.connect(tiered.sock, name="pytest-tier-sd") as c, c.attach("m") as m:
        with pytest.raises(wsrv.WsrvError) as e:
            m.state_dict()
        assert e.value.errno == errno.EAGAIN and "state_dict(layers=" in str(e.value)
        sd = m.state_dict(layers=[-1, 5])
        assert sd and all(".layers.5." in n or ".layers." not in n for n in sd)
        assert any(".layers.5." in n for n in sd)
        for name, t in sd.items():
            assert torch.equal(t, ref[name]), name
