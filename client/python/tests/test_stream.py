# SPDX-License-Identifier: MIT
"""Streams from Python: each layer's tensors on the device while acquired,
resident ones always; stats; the CUDA path where torch has CUDA and a GPU."""

import pytest
import torch

import wsrv
from st_reader import read_model


def test_host_stream_passes(server, client):
    ref = read_model(server.models["llama"])
    with client.attach("llama") as m, m.stream("host", slots=2) as s:
        for _ in range(2):
            seen = []
            for layer in s:
                seen.append(layer.index)
                for name, t in layer.items():
                    assert torch.equal(t, ref[name]), name
            assert seen == [0, 1]
        res = s.resident()
        assert set(res) == {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
        assert all(torch.equal(t, ref[n]) for n, t in res.items())
        st = s.stats()
        assert st["passes"] == 2 and st["acquires"] == 4 and st["bytes_copied"] > 0
        assert st["share"] in ("writer", "reader")


def test_model_finalized_before_its_stream(server, client):
    """A garbage collector finalizes a cycle's objects in any order: the
    model's handle may be finalized (detached) while its stream is still
    open. The stream holds the model in libwsrv, so its close, after a
    pass in flight, is still safe and detaches (it crashed or hung at
    interpreter exit; test_stream.c's detached_under_an_open_stream uses
    the stream in between)."""
    m = client.attach("llama")
    s = m.stream("host", slots=2)
    for layer in s:
        break
    m._handle().__del__()
    s.close()
    m.close()


def test_tp_stream_and_release(server, client):
    ref = read_model(server.models["llama"])
    plan = {"tp_plan": {"layers.*.self_attn.o_proj": "rowwise"}}
    with client.attach("llama") as m, m.stream("host", plan=plan, rank=1, world=2) as s:
        for layer in s:
            o = layer[f"model.layers.{layer.index}.self_attn.o_proj.weight"]
            assert torch.equal(o, ref[f"model.layers.{layer.index}.self_attn.o_proj.weight"][:, 256:])
        # Released: a streamed tensor is not there outside its turn.
        with pytest.raises(wsrv.WsrvError):
            s.tensor("model.layers.0.self_attn.o_proj.weight")


def test_share_off_by_plan(server, client):
    with client.attach("llama") as m, m.stream("host", plan={"share_resident": False}) as s:
        st = s.stats()
        assert st["share"] == "private" and "share_resident" in st["share_note"]


def test_cuda_array_is_one_torch_takes():
    """torch.as_tensor refuses a __cuda_array_interface__ whose read-only
    flag is True (it did so on the first GPU run): the flag must be False."""
    from wsrv.stream import _CudaArray

    iface = _CudaArray(None, 0x7f0000000000, (4, 8), "<f4").__cuda_array_interface__
    assert iface["data"] == (0x7f0000000000, False)
    assert iface["version"] == 2 and iface["shape"] == (4, 8) and iface["strides"] is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch has no CUDA, or no GPU")
def test_cuda_stream(server, client):
    ref = read_model(server.models["llama"])
    with client.attach("llama") as m, m.stream("cuda", slots=2) as s:
        for layer in s:
            for name, t in layer.items():
                assert t.is_cuda and torch.equal(t.cpu(), ref[name]), name


def test_stream_while_loading(tmp_path):
    """Against wsrvd --serve-while-loading with slowed reads: the stream
    opens at once, layer 0 arrives while later layers still load, and each
    later layer waits for its own bytes, which are the files'."""
    from conftest import Server, _mkmodel

    path = _mkmodel(tmp_path / "slow", "llama-mini", "24M", 6)
    ref = read_model(path)
    srv = Server(tmp_path, {"slow": path}, extra=("--serve-while-loading", "--read-rate", "8M",
                                                  "--queue-depth", "1", "--block-size", "256K"))
    try:
        with wsrv.connect(srv.sock, name="pytest-early") as c, c.attach("slow") as m:
            assert m.progress()[2]
            assert [l.index for l in m.layers()] == [-1, 0, 1, 2, 3, 4, 5]
            with m.stream("host", plan={"residency": {"*": "resident", "layers.*": "streamed"}}) as s:
                seen = []
                for layer in s:
                    if layer.index == 0:
                        placed, total, loading = m.progress()
                        assert loading and placed < total
                    seen.append(layer.index)
                    for name, t in layer.items():
                        assert torch.equal(t, ref[name]), name
                assert seen == [0, 1, 2, 3, 4, 5]
            m.wait()
            assert not m.progress()[2]
    finally:
        srv.stop()


def test_wait_reports_progress(tmp_path, capsys):
    """Model.wait(progress=True) on a model still loading says how far it
    is on stderr (a long load is never silent)."""
    from conftest import Server, _mkmodel

    path = _mkmodel(tmp_path / "slow", "llama-mini", "24M", 6)
    srv = Server(tmp_path, {"slow": path}, extra=("--serve-while-loading", "--read-rate", "8M",
                                                  "--queue-depth", "1", "--block-size", "256K"))
    try:
        with wsrv.connect(srv.sock, name="pytest-progress") as c, c.attach("slow") as m:
            assert m.progress()[2]
            m._wait_reporting(None, every=0.5)
            assert not m.progress()[2]
        lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("wsrv: model slow loading: ")]
        assert len(lines) >= 2, lines
        assert all("GiB placed)" in l and "%" in l for l in lines)
    finally:
        srv.stop()
