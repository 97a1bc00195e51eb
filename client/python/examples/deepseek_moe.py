#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""DeepSeek-V3-shaped blocks with their weights from wsrv: FP8 (E4M3)
block-scaled linear layers dequantized with their weight_scale_inv, and
the MoE block (sigmoid router with its score-correction bias, top-k routed
experts, the shared expert) under the "experts" tensor-parallel strategy:
each rank holds and runs only its experts, and an all-reduce sums the
ranks' parts. Debian's torch has no float8, so wsrv hands FP8 weights over
as uint8 views and they are decoded here through a 256-entry table.

    python3 deepseek_moe.py --socket S --model ds --layer 1 --tokens 8

runs the layer's dense or MoE MLP on fixed inputs and prints a digest of
the output; torchrun-style (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT) the
ranks split the experts. --save FILE keeps the output (rank 0)."""

import argparse
import hashlib
import os
import sys

import torch
import torch.nn.functional as F


def e4m3_table():
    """Every E4M3 (the "fn" variant: no infinities, NaN at S.1111.111) byte's value."""
    v = torch.zeros(256, dtype=torch.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            x = float("nan")
        elif e == 0:
            x = (m / 8) * 2.0 ** -6
        else:
            x = (1 + m / 8) * 2.0 ** (e - 7)
        v[b] = -x if s else x
    return v


E4M3 = e4m3_table()


def dequant(w, scale_inv, block):
    """An FP8 weight [R, C] (uint8 bytes) times its block scales:
    scale_inv[i // rows, j // cols] scales w[i, j]."""
    r, c = w.shape
    s = scale_inv.float().repeat_interleave(block[0], 0)[:r].repeat_interleave(block[1], 1)[:, :c]
    return E4M3[w.long()] * s


def linear(x, sd, name, block):
    """x @ W.T for W = sd[name] (FP8 with its scales, or any float dtype)."""
    w = sd[name + ".weight"]
    if w.dtype == torch.uint8:
        w = dequant(w, sd[name + ".weight_scale_inv"], block)
    return F.linear(x, w.float())


def swiglu(x, sd, p, block):
    g, u = linear(x, sd, p + "gate_proj", block), linear(x, sd, p + "up_proj", block)
    return linear(F.silu(g) * u, sd, p + "down_proj", block)


def route(x, sd, p, cfg):
    """Each token's top-k experts and their weights (DeepSeek-V3's sigmoid
    router: chosen with the correction bias, weighted without it)."""
    scores = torch.sigmoid(F.linear(x, sd[p + "gate.weight"].float()))
    bias = sd.get(p + "gate.e_score_correction_bias")
    pick = scores + bias.float() if bias is not None else scores
    idx = pick.topk(cfg["num_experts_per_tok"], -1).indices
    w = scores.gather(-1, idx)
    w = w / w.sum(-1, keepdim=True) * cfg.get("routed_scaling_factor", 1.0)
    return idx, w


def moe(x, sd, p, cfg, block, rank, world, fetch=None, chunk=0):
    """The MoE MLP: this rank's routed experts and, on rank 0, the shared
    expert; summed over the ranks. The experts' weights are sd's (those
    not in it are another rank's), or, with fetch, fetch(ids)'s: a chunk
    of the routed ids at a time (experts on demand: the cache's slots)."""
    idx, w = route(x, sd, p, cfg)
    out = torch.zeros_like(x)
    routed = [e for e in idx.unique().tolist()
              if fetch or p + f"experts.{e}.down_proj.weight" in sd]
    step = chunk or len(routed) or 1
    for k in range(0, len(routed), step):
        part = routed[k:k + step]
        weights = fetch(part) if fetch else sd
        for e in part:
            hit = (idx == e)
            tok = hit.any(-1).nonzero().flatten()
            we = (w * hit).sum(-1)[tok][:, None]
            out[tok] += we * swiglu(x[tok], weights, f"{p}experts.{e}.", block)
    if rank == 0 and cfg.get("n_shared_experts"):
        out += swiglu(x, sd, p + "shared_experts.", block)
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(out)
    return out


def mlp_block(x, sd, layer, cfg, block, rank=0, world=1, fetch=None, chunk=0):
    p = f"model.layers.{layer}.mlp."
    if p + "gate.weight" in sd:
        return moe(x, sd, p, cfg, block, rank, world, fetch, chunk)
    return swiglu(x, sd, p, block)


TP_PLAN = {"layers.*.mlp.experts.*.*": "experts"}


def on_demand(m, x, a, rank, world):
    """The layer's MLP with its routed experts fetched into the stream's
    expert cache: the router from the layer, then only the experts it
    chose. Returns the output and the cache's counters."""
    import wsrv

    plan = {"residency": {"layers.*.mlp.experts.*.*": "experts_on_demand"},
            "expert_cache": {"fraction": a.cache}}
    if world > 1:
        plan["tp_plan"] = TP_PLAN
    with wsrv.Stream(m, "host", plan=plan, rank=rank, world=world) as st:
        for layer in st:
            if layer.index != a.layer:
                continue
            sd = dict(layer)
            sd.update(st.resident())
            owned = set(layer.expert_ids)

            def fetch(ids):
                layer.release_experts()  # the last chunk's
                return layer.experts([e for e in ids if e in owned])

            out = mlp_block(x, sd, a.layer, m.config, m.fp8_block(), rank, world, fetch,
                            st.expert_stats()["slots"])
            return out, st.expert_stats()
    raise SystemExit(f"no layer {a.layer}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket")
    ap.add_argument("--model", required=True)
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--save")
    ap.add_argument("--experts-on-demand", action="store_true")
    ap.add_argument("--cache", type=float, default=0.25, help="expert cache, fraction of the experts")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import wsrv

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
    with wsrv.connect(a.socket, name=f"deepseek_moe.py rank {rank}") as cl, cl.attach(a.model) as m:
        m.wait(progress=True)  # a model still loading: say how far it is
        x = torch.randn(a.tokens, m.config["hidden_size"], generator=torch.Generator().manual_seed(7))
        if a.experts_on_demand:
            out, stats = on_demand(m, x, a, rank, world)
            experts = stats["misses"] + stats["hits"]
            print(f"experts fetched {stats['misses']} of {stats['experts']} ({stats['bytes_copied']} bytes)")
        else:
            sd = m.state_dict({"tp_plan": TP_PLAN} if world > 1 else None, rank, world)
            out = mlp_block(x, sd, a.layer, m.config, m.fp8_block(), rank, world)
            experts = sum(1 for k in sd if ".experts." in k and k.endswith("down_proj.weight"))
        if rank == 0:
            print("experts held", experts)
            print("output", hashlib.sha256(out.numpy().tobytes()).hexdigest()[:16])
            if a.save:
                torch.save(out, a.save)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
