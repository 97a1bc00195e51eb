#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A Llama-architecture decoder in plain PyTorch, its weights served by
wsrv: RMSNorm, rotary embeddings (the config's rope_theta), grouped-query
attention with a KV cache, SwiGLU MLP, tied or untied lm_head, greedy
generation. Weights come resident (Model.state_dict: zero-copy views of the
shared mapping) or streamed layer by layer (Model.stream).

Tensor parallel, torchrun-style: with WORLD_SIZE > 1 (and RANK,
MASTER_ADDR, MASTER_PORT) each process joins a gloo group, takes its views
under the tp_plan below and all-reduces after the rowwise layers.

    python3 llama.py --socket S --model demo --prompt-ids 1,2,3 --tokens 16

prints the generated ids and a digest of the logits. Computation is in
float32 (weights are upcast as they are used)."""

import argparse
import hashlib
import os
import sys

import torch
import torch.nn.functional as F

TP_PLAN = {
    "layers.*.self_attn.q_proj": "colwise",
    "layers.*.self_attn.k_proj": "kv_heads",
    "layers.*.self_attn.v_proj": "kv_heads",
    "layers.*.self_attn.o_proj": "rowwise",
    "layers.*.mlp.gate_proj": "colwise",
    "layers.*.mlp.up_proj": "colwise",
    "layers.*.mlp.down_proj": "rowwise",
}


class Config:
    """What the decoder needs from config.json, for rank of world."""

    def __init__(self, cfg, rank=0, world=1):
        self.hidden = cfg["hidden_size"]
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.tied = cfg.get("tie_word_embeddings", False)
        self.rank, self.world = rank, world
        self.local_heads = self.heads // world
        self.local_kv = self.kv_heads // world if world <= self.kv_heads else 1


class DictWeights:
    """All weights at hand: a state_dict (or any name -> tensor mapping)."""

    def __init__(self, d):
        self.d = d

    def __getitem__(self, name):
        return self.d[name]

    def layers(self, n):
        for _ in range(n):
            yield self.d


class StreamWeights:
    """Global tensors resident on the stream's device; each numbered layer
    acquired for its turn of every forward pass."""

    def __init__(self, stream):
        self.stream = stream

    def __getitem__(self, name):
        return self.stream.tensor(name)

    def layers(self, n):
        return iter(self.stream)


def rms_norm(x, w, eps):
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def rope(x, pos, theta):
    """Rotary embedding (rotate-half form) of x [T, H, D] at positions pos [T]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None, :], torch.cat([ang, ang], -1).sin()[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def all_reduce(x, c):
    if c.world > 1:
        import torch.distributed as dist

        dist.all_reduce(x)
    return x


def attention(c, lw, p, h, pos, cache, i):
    T = h.shape[0]
    q = F.linear(h, lw[p + "self_attn.q_proj.weight"].float()).view(T, c.local_heads, c.head_dim)
    k = F.linear(h, lw[p + "self_attn.k_proj.weight"].float()).view(T, c.local_kv, c.head_dim)
    v = F.linear(h, lw[p + "self_attn.v_proj.weight"].float()).view(T, c.local_kv, c.head_dim)
    q, k = rope(q, pos, c.theta), rope(k, pos, c.theta)
    if i in cache:
        k, v = torch.cat([cache[i][0], k]), torch.cat([cache[i][1], v])
    cache[i] = (k, v)
    group = c.local_heads // c.local_kv
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    S = k.shape[0]
    scores = torch.einsum("thd,shd->hts", q, k) / (c.head_dim ** 0.5)
    mask = torch.arange(S)[None, :] > (S - T + torch.arange(T))[:, None]
    att = scores.masked_fill(mask[None], float("-inf")).softmax(-1)
    out = torch.einsum("hts,shd->thd", att, v).reshape(T, c.local_heads * c.head_dim)
    return all_reduce(F.linear(out, lw[p + "self_attn.o_proj.weight"].float()), c)


def mlp(c, lw, p, h):
    g = F.linear(h, lw[p + "mlp.gate_proj.weight"].float())
    u = F.linear(h, lw[p + "mlp.up_proj.weight"].float())
    return all_reduce(F.linear(F.silu(g) * u, lw[p + "mlp.down_proj.weight"].float()), c)


def forward(c, w, ids, pos, cache):
    """Logits [vocab] of the last of ids (positions pos), the cache updated."""
    x = w["model.embed_tokens.weight"][ids].float()
    for i, lw in enumerate(w.layers(c.layers)):
        p = f"model.layers.{i}."
        x = x + attention(c, lw, p, rms_norm(x, lw[p + "input_layernorm.weight"], c.eps), pos, cache, i)
        x = x + mlp(c, lw, p, rms_norm(x, lw[p + "post_attention_layernorm.weight"], c.eps))
    x = rms_norm(x[-1:], w["model.norm.weight"], c.eps)
    head = w["model.embed_tokens.weight" if c.tied else "lm_head.weight"]
    return F.linear(x, head.float())[0]


def generate(c, w, prompt, n):
    """Greedy: the n new ids and each step's logits."""
    cache, ids, logits = {}, list(prompt), []
    step = torch.tensor(prompt)
    pos = torch.arange(len(prompt))
    with torch.no_grad():
        for _ in range(n):
            lg = forward(c, w, step, pos, cache)
            logits.append(lg)
            nxt = int(lg.argmax())
            ids.append(nxt)
            step, pos = torch.tensor([nxt]), torch.tensor([len(ids) - 1])
    return ids[len(prompt):], logits


def digest(logits):
    h = hashlib.sha256()
    for lg in logits:
        h.update(lg.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", default="1,2,3")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--stream", action="store_true", help="stream the layers (host device)")
    ap.add_argument("--hold", type=float, default=0, help="seconds to hold the weights at the end")
    ap.add_argument("--save-logits", help="rank 0 saves every step's logits there (torch.save)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import wsrv

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
    plan = {"tp_plan": TP_PLAN} if world > 1 else None
    with wsrv.connect(a.socket, name=f"llama.py rank {rank}") as cl, cl.attach(a.model) as m:
        c = Config(m.config, rank, world)
        if a.stream:
            src = m.stream("host", plan=plan, rank=rank, world=world)
            w = StreamWeights(src)
        else:
            w = DictWeights(m.state_dict(plan, rank, world))
        ids, logits = generate(c, w, [int(x) for x in a.prompt_ids.split(",")], a.tokens)
        if rank == 0:
            print("ids", ",".join(map(str, ids)))
            print("logits", digest(logits))
            sys.stdout.flush()
            if a.save_logits:
                torch.save(torch.stack(logits), a.save_logits)
        if a.hold:
            import time

            time.sleep(a.hold)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
