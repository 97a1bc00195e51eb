# SPDX-License-Identifier: MIT
"""DeepSeek-V3-shaped blocks: FP8 block-scaled weights dequantized from
wsrv's uint8 views equal the same from the files; the MoE block under the
experts strategy, each of W ranks running only its experts, matches one
process."""

import os
import subprocess
import sys

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
