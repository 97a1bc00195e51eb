#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A Llama-architecture decoder in plain PyTorch, its weights served by
wsrv: RMSNorm, rotary embeddings (the config's rope_theta and rope_scaling:
default, linear, dynamic or llama3, as Hugging Face computes them),
grouped-query attention with a KV cache, a gated MLP with the config's
hidden_act, tied or untied lm_head, greedy generation. A config value it
does not implement is refused with a sentence naming the key, never
computed as something else. Weights come resident (Model.state_dict:
zero-copy views of the shared mapping) or streamed layer by layer
(Model.stream).

Tensor parallel, torchrun-style: with WORLD_SIZE > 1 (and RANK,
MASTER_ADDR, MASTER_PORT) each process joins a gloo group, takes its views
under the tp_plan below and all-reduces after the rowwise layers.

    python3 llama.py --socket S --model demo --prompt-ids 1,2,3 --tokens 16

prints the generated ids and a digest of the logits. Computation is in
float32: each weight is upcast block by block into one buffer reused for
every token (upcasting whole weights made a 2 GB model's token cost 4 GB of
fresh memory: 19 minutes for 16 tokens on a VM that hands freed pages back).
A generation that takes more than a few seconds says how far it is, a
line per token on stderr."""

import argparse
import hashlib
import math
import os
import signal
import sys
import time

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


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


# hidden_act values of Llama-architecture checkpoints, as transformers'
# ACT2FN computes them.
ACTIVATIONS = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "gelu_new": _gelu_tanh,
               "gelu_pytorch_tanh": _gelu_tanh, "relu": F.relu}
ROPE_TYPES = ("default", "linear", "dynamic", "llama3")


class ConfigError(ValueError):
    """config.json asks for something this decoder does not compute."""


def _number(sc, key, kind="rope_scaling"):
    v = sc.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ConfigError(f"config.json: {kind}.{key} is {v!r}; a positive number is needed")
    return float(v)


class Rope:
    """Rotary frequencies for head_dim under the config's rope_theta and
    rope_scaling, as transformers' rope initialisations compute them (its
    attention scaling is 1 for all four types)."""

    def __init__(self, cfg, head_dim):
        self.dim = head_dim
        self.theta = float(cfg.get("rope_theta", 10000.0))
        self.max_pos = cfg.get("max_position_embeddings", 2048)
        sc = cfg.get("rope_scaling") or {}
        if not isinstance(sc, dict):
            raise ConfigError(f"config.json: rope_scaling is {sc!r}; an object or null is needed")
        self.type = sc.get("rope_type", sc.get("type", "default"))
        if self.type not in ROPE_TYPES:
            raise ConfigError(f"config.json: rope_scaling.rope_type {self.type!r} is not "
                              f"supported (one of {', '.join(ROPE_TYPES)})")
        self.base = self._inv(self.theta)
        if self.type != "default":
            self.factor = _number(sc, "factor")
        if self.type == "linear":
            self.base = self.base / self.factor
        elif self.type == "llama3":
            self.base = self._llama3(sc)

    def _inv(self, theta):
        d = self.dim
        return 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))

    def _llama3(self, sc):
        low, high = _number(sc, "low_freq_factor"), _number(sc, "high_freq_factor")
        old = _number(sc, "original_max_position_embeddings")
        if high <= low:
            raise ConfigError(f"config.json: rope_scaling.high_freq_factor {high} is not above "
                              f"low_freq_factor {low}")
        inv = self.base
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / self.factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled)

    def inv_freq(self, seq_len):
        """The frequencies for a forward pass whose last position is
        seq_len - 1 (dynamic NTK scaling grows the base past the config's
        max_position_embeddings)."""
        if self.type != "dynamic" or seq_len <= self.max_pos:
            return self.base
        f, d = self.factor, self.dim
        return self._inv(self.theta * ((f * seq_len / self.max_pos) - (f - 1)) ** (d / (d - 2)))


class Config:
    """What the decoder needs from config.json, for rank of world."""

    def __init__(self, cfg, rank=0, world=1):
        self.hidden = cfg["hidden_size"]
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.rope = Rope(cfg, self.head_dim)
        act = cfg.get("hidden_act", "silu")
        if act not in ACTIVATIONS:
            raise ConfigError(f"config.json: hidden_act {act!r} is not supported "
                              f"(one of {', '.join(ACTIVATIONS)})")
        self.act = ACTIVATIONS[act]
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


# One float32 buffer per weight width, reused by every upcast block.
_SCRATCH = {}
_BLOCK_FLOATS = 8 << 20  # 32 MiB of float32 a block


def linear(x, w):
    """F.linear(x, w) in float32, w upcast a block of rows at a time into a
    buffer kept for the next token: no fresh memory per token."""
    if w.dtype == torch.float32:
        return F.linear(x, w)
    rows, cols = w.shape
    per = max(1, min(rows, _BLOCK_FLOATS // cols))
    buf = _SCRATCH.get(cols)
    if buf is None or buf.shape[0] < per:
        buf = _SCRATCH[cols] = torch.empty(per, cols)
    out = torch.empty(x.shape[:-1] + (rows,))
    for r in range(0, rows, per):
        n = min(per, rows - r)
        b = buf[:n]
        b.copy_(w[r:r + n])
        out[..., r:r + n] = F.linear(x, b)
    return out


def rms_norm(x, w, eps):
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def rope(x, pos, inv):
    """Rotary embedding (rotate-half form) of x [T, H, D] at positions pos [T],
    with frequencies inv [D/2]."""
    d = x.shape[-1]
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
    q = linear(h, lw[p + "self_attn.q_proj.weight"]).view(T, c.local_heads, c.head_dim)
    k = linear(h, lw[p + "self_attn.k_proj.weight"]).view(T, c.local_kv, c.head_dim)
    v = linear(h, lw[p + "self_attn.v_proj.weight"]).view(T, c.local_kv, c.head_dim)
    inv = c.rope.inv_freq(int(pos.max()) + 1)
    q, k = rope(q, pos, inv), rope(k, pos, inv)
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
    return all_reduce(linear(out, lw[p + "self_attn.o_proj.weight"]), c)


def mlp(c, lw, p, h):
    g = linear(h, lw[p + "mlp.gate_proj.weight"])
    u = linear(h, lw[p + "mlp.up_proj.weight"])
    return all_reduce(linear(c.act(g) * u, lw[p + "mlp.down_proj.weight"]), c)


def forward(c, w, ids, pos, cache):
    """Logits [vocab] of the last of ids (positions pos), the cache updated."""
    x = w["model.embed_tokens.weight"][ids].float()
    for i, lw in enumerate(w.layers(c.layers)):
        p = f"model.layers.{i}."
        x = x + attention(c, lw, p, rms_norm(x, lw[p + "input_layernorm.weight"], c.eps), pos, cache, i)
        x = x + mlp(c, lw, p, rms_norm(x, lw[p + "post_attention_layernorm.weight"], c.eps))
    x = rms_norm(x[-1:], w["model.norm.weight"], c.eps)
    head = w["model.embed_tokens.weight" if c.tied else "lm_head.weight"]
    return linear(x, head)[0]


def generate(c, w, prompt, n, progress=None):
    """Greedy: the n new ids and each step's logits. progress: a file told
    of each token once the generation has taken more than 2 s."""
    cache, ids, logits = {}, list(prompt), []
    step = torch.tensor(prompt)
    pos = torch.arange(len(prompt))
    t0 = time.monotonic()
    with torch.no_grad():
        for k in range(n):
            lg = forward(c, w, step, pos, cache)
            if progress is not None and time.monotonic() - t0 > 2:
                print(f"llama.py: token {k + 1} of {n}, {time.monotonic() - t0:.1f} s so far", file=progress,
                      flush=True)
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
    ap.add_argument("--hold", default="0",
                    help="hold the weights at the end: SECONDS, or 'signal' until SIGUSR1, SIGINT or "
                         "SIGTERM (which also end a timed hold)")
    ap.add_argument("--save-logits", help="rank 0 saves every step's logits there (torch.save)")
    a = ap.parse_args()
    if a.hold != "signal":
        try:
            float(a.hold)
        except ValueError:
            ap.error(f"--hold: seconds or 'signal', not {a.hold!r}")
    hold_signals = None
    if a.hold == "signal" or float(a.hold) > 0:
        # SIGUSR1 blocked now: one sent before the hold ends it then.
        hold_signals = {signal.SIGUSR1, signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import wsrv

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=world)
    plan = {"tp_plan": TP_PLAN} if world > 1 else None
    with wsrv.connect(a.socket, name=f"llama.py rank {rank}") as cl, cl.attach(a.model) as m:
        m.wait(progress=True)  # a model still loading: say how far it is
        try:
            c = Config(m.config, rank, world)
        except ConfigError as e:
            sys.exit(f"llama.py: {e}")
        if a.stream:
            src = m.stream("host", plan=plan, rank=rank, world=world)
            w = StreamWeights(src)
        else:
            w = DictWeights(m.state_dict(plan, rank, world))
        ids, logits = generate(c, w, [int(x) for x in a.prompt_ids.split(",")], a.tokens,
                               progress=sys.stderr if rank == 0 else None)
        if rank == 0:
            print("ids", ",".join(map(str, ids)))
            print("logits", digest(logits))
            sys.stdout.flush()
            if a.save_logits:
                torch.save(torch.stack(logits), a.save_logits)
        if hold_signals is not None:
            signal.pthread_sigmask(signal.SIG_BLOCK, hold_signals)
            if a.hold == "signal":
                signal.sigwait(hold_signals)
            else:
                signal.sigtimedwait(hold_signals, float(a.hold))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
