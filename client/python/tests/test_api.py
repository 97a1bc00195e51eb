# SPDX-License-Identifier: MIT
"""The Pythonic face: connect, models, stats, attach, the Mapping, tensors'
attributes, zero-copy read-only views, dtypes, errors, lifetimes."""

import errno
import gc
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import wsrv
from st_reader import read_model


def test_connect_models_stats(server, client):
    names = {m["name"] for m in client.models()}
    assert names == {"llama", "ds"}
    st = client.stats()
    assert st["clients"] >= 1 and st["server_version"] == wsrv.version()
    assert {m["name"] for m in st["models"]} == names
    for m in st["models"]:  # loaded from its files: every byte read there
        assert m["generation"] == 1 and not m["adopted"]
        assert 0 < m["disk_bytes"] <= m["arena_bytes"]


def test_errors_carry_errno_and_sentence(server, client, tmp_path):
    with pytest.raises(wsrv.WsrvError) as e:
        client.attach("nope")
    assert e.value.errno == errno.ENOENT and "nope" in e.value.message
    with pytest.raises(wsrv.WsrvError) as e:
        wsrv.connect(str(tmp_path / "none.sock"))
    assert e.value.errno == errno.ENOENT
    with client.attach("llama") as m:
        with pytest.raises(wsrv.WsrvError) as e:
            m.tensor("model.nothing")
        assert e.value.errno == errno.ENOENT
        with pytest.raises(KeyError):
            m["model.nothing"]
        with pytest.raises(wsrv.WsrvError) as e:
            m.state_dict({"tp_plan": {"layers.*.self_attn.q_proj": "colwise"}}, rank=0, world=3)
        assert e.value.errno == errno.EINVAL and "divide" in e.value.message
        with pytest.raises(wsrv.WsrvError):
            m.state_dict({"residency": {"x": "nowhere"}})
        # Issue 79 item 5: a typo'd key, a pattern matching nothing.
        with pytest.raises(wsrv.WsrvError) as e:
            m.state_dict({"tp_plann": {"layers.*.self_attn.q_proj": "colwise"}}, rank=0, world=2)
        assert 'did you mean "tp_plan"' in e.value.message
        with pytest.raises(wsrv.WsrvError) as e:
            m.state_dict({"tp_plan": {"layers.*.self_atn.q_proj": "colwise"}}, rank=0, world=2)
        assert "matches no tensor" in e.value.message


def test_mapping_layers_config(server, client):
    ref = read_model(server.models["llama"])
    with client.attach("llama") as m:
        assert set(m) == set(ref) and len(m) == len(ref)
        assert m.config["num_hidden_layers"] == 2 and m.config["rope_theta"] == 500000.0
        layers = m.layers()
        assert [l.index for l in layers] == [-1, 0, 1]
        assert sum(len(l.names) for l in layers) == len(m)
        t = m["model.layers.1.self_attn.q_proj.weight"]
        assert (t.name, t.dtype, t.shape, t.layer) == (
            "model.layers.1.self_attn.q_proj.weight", "BF16", (512, 512), 1)
        assert t.nbytes == 512 * 512 * 2
        assert m.tensor(t.name).xxh3 == t.xxh3


def test_names_in_the_models_order(server, client):
    """The names come in one call (wsrv_model_names): the same, in the
    same order, as one call a tensor gives them."""
    from wsrv._lib import lib, text
    with client.attach("llama") as m:
        one_by_one = [text(lib.wsrv_model_tensor_name(m._ptr(), i)) for i in range(len(m))]
        assert list(m) == one_by_one


def test_views_are_zero_copy_and_read_only(server, client):
    ref = read_model(server.models["llama"])
    with client.attach("llama") as m:
        t = m["model.embed_tokens.weight"]
        a, x = t.numpy(), t.torch()
        assert a.dtype == np.uint16 and not a.flags.writeable   # BF16 bits in numpy
        with pytest.raises(ValueError):
            a.flags.writeable = True
        assert x.dtype == torch.bfloat16 and torch.equal(x, ref[t.name])
        # The same pages: two views share their address.
        assert x.data_ptr() == t.torch().data_ptr() == a.ctypes.data
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # no warning reaches the user
            m["model.norm.weight"].torch()


def test_a_write_faults(server):
    """Writing a view is a fault, not a change to the shared weights."""
    code = ("import sys, wsrv; c = wsrv.connect(sys.argv[1]); m = c.attach('llama');"
            "t = m['model.norm.weight'].torch(); t.add_(1)")
    r = subprocess.run([sys.executable, "-c", code, server.sock], env=dict(os.environ),
                       capture_output=True, timeout=60)
    assert r.returncode == -11, r.stderr  # SIGSEGV
    with wsrv.connect(server.sock) as c, c.attach("llama") as m:
        assert torch.equal(m["model.norm.weight"].torch(), read_model(server.models["llama"])["model.norm.weight"])


def test_fp8_comes_as_uint8(server, client):
    ref = read_model(server.models["ds"])
    with client.attach("ds") as m:
        t = m["model.layers.0.mlp.gate_proj.weight"]
        assert t.dtype == "F8_E4M3"
        x = t.torch()
        assert x.dtype == torch.uint8 and x.shape == t.shape and torch.equal(x, ref[t.name])
        s = m["model.layers.0.mlp.gate_proj.weight_scale_inv"].torch()
        assert s.dtype == torch.float32 and torch.equal(s, ref["model.layers.0.mlp.gate_proj.weight_scale_inv"])
        assert m.fp8_block() == (128, 128)


def test_views_outlive_model_and_client(server):
    c = wsrv.connect(server.sock)
    m = c.attach("llama")
    x = m["model.layers.0.mlp.up_proj.weight"].torch()
    want = x.clone()
    m.close()
    c.close()
    gc.collect()
    assert torch.equal(x, want)   # still mapped: the view holds the model
    with pytest.raises(wsrv.WsrvError):
        m.tensor("model.norm.weight")
    del x
    gc.collect()


def test_bad_arguments_refused(server, client):
    """Issue 37 item 16: attach("m\\x00other") attached m (the C string
    ended at the NUL), world=0 was taken by state_dict and stream, and
    float expert ids were truncated. Each is now refused with a reason."""
    with pytest.raises(ValueError, match="NUL"):
        client.attach("llama\x00other")
    with pytest.raises(ValueError, match="NUL"):
        wsrv.connect(server.sock, name="a\x00b")
    with client.attach("llama") as m:
        with pytest.raises(ValueError, match="NUL"):
            m.tensor("model.embed_tokens.weight\x00x")
        for rank, world in ((0, 0), (0, -1), (2, 2), (-1, 2)):
            with pytest.raises(ValueError):
                m.state_dict(rank=rank, world=world)
            with pytest.raises(ValueError):
                wsrv.Stream(m, "host", rank=rank, world=world)
        with pytest.raises(TypeError):
            m.state_dict(world=1.0)
    with client.attach("ds") as m:
        plan = {"residency": {"layers.*.mlp.experts.*.*": "experts_on_demand"}}
        with wsrv.Stream(m, "host", plan=plan) as st:
            for layer in st:
                if layer.index != 1:
                    continue
                for bad in ([1.5], [2.0], torch.tensor([2.0]), np.array([1.0]), [True]):
                    with pytest.raises(TypeError):
                        layer.experts(bad)
                assert len(layer.experts(np.array([2], dtype=np.int64))) == 6
            with pytest.raises(TypeError):
                st.prefetch_experts(1, [7.9])


def test_connect_waits_then_names_the_socket(tmp_path, server):
    """Issue 49 item 6: connect(wait=SECONDS) tries again while nobody
    answers, then names the socket it waited for; a server that is up is
    connected to at once."""
    import time
    sock = str(tmp_path / "nobody.sock")
    t0 = time.monotonic()
    with pytest.raises(wsrv.WsrvError) as e:
        wsrv.connect(sock, wait=0.4)
    assert e.value.errno == errno.ENOENT and sock in str(e.value)
    assert 0.35 <= time.monotonic() - t0  # it waited; how long past that is the machine's
    with pytest.raises(ValueError):
        wsrv.connect(sock, wait=-1)
    with wsrv.connect(server.sock, wait=5) as c:
        assert c.models()
