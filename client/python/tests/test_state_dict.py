# SPDX-License-Identifier: MIT
"""A rank's state_dict: views of the shared mapping equal to slicing the
files read independently, for every strategy the examples use; another
rank's experts absent; copies only where a layout forces one."""

import pytest
import torch

from st_reader import read_model

LLAMA_TP = {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.k_proj": "kv_heads",
            "layers.*.self_attn.v_proj": "kv_heads", "layers.*.self_attn.o_proj": "rowwise",
            "layers.*.mlp.gate_proj": "colwise", "layers.*.mlp.up_proj": "colwise",
            "layers.*.mlp.down_proj": "rowwise"}


def expected(name, full, rank, world, kv_heads=2, head_dim=64):
    """What rank's part is, by the test's own reading of the plan."""
    if "q_proj" in name or "gate_proj" in name or "up_proj" in name:
        n = full.shape[0] // world
        return full[rank * n:(rank + 1) * n]
    if "k_proj" in name or "v_proj" in name:
        if world <= kv_heads:
            n = full.shape[0] // world
            return full[rank * n:(rank + 1) * n]
        h = rank // (world // kv_heads)
        return full[h * head_dim:(h + 1) * head_dim]
    if "o_proj" in name or "down_proj" in name:
        n = full.shape[1] // world
        return full[:, rank * n:(rank + 1) * n]
    return full


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_llama_views(server, client, world):
    ref = read_model(server.models["llama"])
    with client.attach("llama") as m:
        for rank in range(world):
            sd = m.state_dict({"tp_plan": LLAMA_TP}, rank, world)
            assert set(sd) == set(ref) and not sd.copied
            for name, t in sd.items():
                want = expected(name, ref[name], rank, world)
                assert t.shape == want.shape and torch.equal(t, want), name
                # A view, not a copy: inside the shared mapping of the tensor.
                base = m[name].torch()
                lo = base.data_ptr()
                assert lo <= t.data_ptr() < lo + m[name].nbytes, name


def test_deepseek_experts_and_scales(server, client):
    ref = read_model(server.models["ds"])
    plan = {"tp_plan": {"layers.*.mlp.experts.*.*": "experts",
                        "layers.*.self_attn.o_proj": "rowwise"}}
    with client.attach("ds") as m:
        held = set()
        for rank in range(4):
            sd = m.state_dict(plan, rank, 4)
            mine = {k for k in sd if ".experts." in k}
            for k in mine:
                e = int(k.split(".experts.")[1].split(".")[0])
                assert e // 4 == rank, k
                assert torch.equal(sd[k], ref[k])
            held |= mine
            o = sd["model.layers.1.self_attn.o_proj.weight"]
            full = ref["model.layers.1.self_attn.o_proj.weight"]
            assert torch.equal(o, full[:, rank * 256:(rank + 1) * 256])
            # The block scales split with their weight (128 columns a block).
            sc = sd["model.layers.1.self_attn.o_proj.weight_scale_inv"]
            fsc = ref["model.layers.1.self_attn.o_proj.weight_scale_inv"]
            assert torch.equal(sc, fsc[:, rank * 2:(rank + 1) * 2])
        assert held == {k for k in ref if ".experts." in k}


@pytest.mark.parametrize("model,plan,world", [
    ("llama", {"tp_plan": LLAMA_TP}, 4),
    ("ds", {"tp_plan": {"layers.*.mlp.experts.*.*": "experts", "layers.*.self_attn.o_proj": "rowwise"}}, 4),
    ("ds", None, 1)])
def test_bulk_views_equal_one_by_one(client, model, plan, world):
    """state_dict builds its views in bulk (one libwsrv call for every
    tensor, one torch tensor per segment and dtype): the same views,
    tensor for tensor, as the per-tensor path, which keeps what bulk
    cannot view."""
    from wsrv._lib import StreamOpts, lib, new
    from wsrv.plan import Plan
    from wsrv.stream import open_raw

    with client.attach(model) as m:
        for rank in range(world):
            sd = m.state_dict(plan, rank, world)
            s = open_raw(m._ptr(), None, Plan.of(plan), new(StreamOpts, slots=1, rank=rank, world=world))
            try:
                one = m._views_one(s, list(range(len(m))))
            finally:
                lib.wsrv_stream_close(s)
            assert list(sd) == list(one)
            for k, t in one.items():
                b = sd[k]
                assert (b.data_ptr(), b.shape, b.stride(), b.dtype) == \
                    (t.data_ptr(), t.shape, t.stride(), t.dtype), k


def test_runs_fold_a_layers_experts():
    """_runs: tensors of one kind and shape whose starts step evenly form
    one run (one as_strided, split by unbind); two projections laid out
    alternately are two runs, not a run per tensor; a key change or an
    uneven step ends a run, and every run steps evenly."""
    import numpy as np

    from wsrv._bulk import _runs

    # 40 experts, each a block of 300 elements: gate at +0, up at +100.
    kind = np.array([0, 1] * 40 + [0, 0, 0])
    start = np.array([e * 300 + k * 100 for e in range(40) for k in (0, 1)] + [20000, 20010, 20030])
    order, first, runs = _runs([kind], start)
    assert sorted(order.tolist()) == list(range(len(start)))
    assert runs[:, 0].sum() == len(start)
    bounds = np.append(first, len(start))
    for (a, b), (n, step) in zip(zip(bounds[:-1], bounds[1:]), runs.tolist()):
        members = order[a:b]
        assert n == b - a and len(set(kind[members].tolist())) == 1
        assert all(np.diff(start[members]) == step)
    # gate's 40 and up's 40 are a run each; the three uneven ones at most three more.
    assert sorted(runs[:, 0].tolist())[-2:] == [40, 40] and len(runs) <= 5
