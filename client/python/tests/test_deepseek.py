# SPDX-License-Identifier: MIT
"""DeepSeek-V3-shaped blocks: FP8 block-scaled weights dequantized from
wsrv's uint8 views equal the same from the files; the MoE block under the
experts strategy, each of W ranks running only its experts, matches one
process."""

import errno
import os
import subprocess
import sys

import pytest
import torch

import deepseek_moe as ds
import wsrv
from st_reader import read_model
from test_llama import free_port

EXAMPLE = os.path.join(os.path.dirname(ds.__file__), "deepseek_moe.py")


def test_e4m3_table():
    t = ds.E4M3
    assert t[0x38] == 1.0 and t[0xb8] == -1.0 and t[0x7e] == 448.0
    assert t[0x01] == 2.0 ** -9 and torch.isnan(t[0x7f])


def test_fp8_linear_matches_files(server, client):
    ref = read_model(server.models["ds"])
    with client.attach("ds") as m:
        sd = m.state_dict()
        x = torch.randn(3, 512, generator=torch.Generator().manual_seed(1))
        for layer in (0, 1):
            a = ds.mlp_block(x, sd, layer, m.config, m.fp8_block())
            b = ds.mlp_block(x, ref, layer, m.config, m.fp8_block())
            assert torch.equal(a, b) and not torch.isnan(a).any()
        w = ds.dequant(sd["model.layers.0.mlp.down_proj.weight"],
                       sd["model.layers.0.mlp.down_proj.weight_scale_inv"], (128, 128))
        # Block (1, 3) of the weight is scaled by scale_inv[1, 3].
        raw = ds.E4M3[ref["model.layers.0.mlp.down_proj.weight"].long()]
        s = ref["model.layers.0.mlp.down_proj.weight_scale_inv"]
        assert torch.equal(w[128:256, 384:512], raw[128:256, 384:512] * s[1, 3])


def test_moe_experts_across_ranks(server, tmp_path):
    single = tmp_path / "one.pt"
    r = subprocess.run([sys.executable, EXAMPLE, "--socket", server.sock, "--model", "ds",
                        "--layer", "1", "--save", str(single)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    want = torch.load(single)
    for world in (2, 4):
        port, procs = free_port(), []
        for rank in range(world):
            env = dict(os.environ, WORLD_SIZE=str(world), RANK=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen(
                [sys.executable, EXAMPLE, "--socket", server.sock, "--model", "ds", "--layer",
                 "1", "--save", str(tmp_path / f"w{world}.pt")],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=240) for p in procs]
        for p, (o, e) in zip(procs, outs):
            assert p.returncode == 0, e
        assert f"experts held {16 // world}" in outs[0][0]
        got = torch.load(tmp_path / f"w{world}.pt")
        err = ((got - want).abs().max() / want.abs().max()).item()
        print(f"W={world}: largest difference {err:.2e} of the largest output")
        assert err < 1e-5


EXPERTS = {"residency": {"layers.*.mlp.experts.*.*": "experts_on_demand"}}


def test_experts_on_demand_api(server, client):
    """layer.experts(ids) hands over exactly the state_dict's bytes; hits,
    misses, prefetch and pins are counted."""
    with client.attach("ds") as m:
        sd = m.state_dict()
        plan = dict(EXPERTS, expert_cache={"slots": 4})
        with wsrv.Stream(m, "host", plan=plan) as st:
            for layer in st:
                if layer.index != 1:
                    continue
                assert not any(".experts." in nm for nm in layer)
                assert layer.expert_ids == list(range(16))
                got = layer.experts(torch.tensor([5, 2, 5]))
                assert len(got) == 12  # 2 experts x (3 weights + 3 scales)
                for nm, t in got.items():
                    assert torch.equal(t, sd[nm]), nm
            st.prefetch_experts(1, [7])
            for layer in st:
                if layer.index == 1:
                    got = layer.experts([7, 2])
                    assert all(torch.equal(t, sd[nm]) for nm, t in got.items()) and len(got) == 12
            s1 = st.expert_stats(1)
            assert s1["misses"] == 2 and s1["acquires"] == 4 and s1["experts"] == 16
            assert s1["prefetches"] == 1 and s1["prefetch_hits"] == 1 and s1["hits"] == 2
            assert st.expert_stats()["slots"] == 4
            assert st.experts_resident(1) == [2, 5, 7]
            st.pin_experts(1, [2])
            assert st.expert_stats()["slots_pinned"] == 1
            with pytest.raises(wsrv.WsrvError) as e:
                for layer in st:
                    if layer.index == 1:
                        layer.experts([99])
            assert e.value.errno == errno.ENOENT


def test_experts_on_demand_bit_identical(server, tmp_path):
    """The example's MoE layer with its routed experts fetched on demand
    equals, bit for bit, the same with every weight in place."""
    outs = {}
    for mode in ("resident", "on-demand"):
        extra = ["--experts-on-demand", "--cache", "0.25"] if mode == "on-demand" else []
        r = subprocess.run([sys.executable, EXAMPLE, "--socket", server.sock, "--model", "ds",
                            "--layer", "1", "--save", str(tmp_path / f"{mode}.pt")] + extra,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs[mode] = torch.load(tmp_path / f"{mode}.pt")
        if mode == "on-demand":
            assert "experts fetched" in r.stdout
    assert torch.equal(outs["resident"], outs["on-demand"])
