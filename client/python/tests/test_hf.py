# SPDX-License-Identifier: MIT
"""wsrv.hf.load_into with plain torch modules shaped like a Llama (the
checkpoint's names): zero-copy views, a meta-device build, tied
embeddings, dtype casts, the base model's prefix, a TP plan, strictness,
shape mismatches, and a forward pass equal to the state_dict's."""

import pytest
import torch
from torch import nn

import wsrv
import wsrv.hf


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.q_proj = nn.Linear(h, c["num_attention_heads"] * hd, bias=False)
        self.k_proj = nn.Linear(h, c["num_key_value_heads"] * hd, bias=False)
        self.v_proj = nn.Linear(h, c["num_key_value_heads"] * hd, bias=False)
        self.o_proj = nn.Linear(c["num_attention_heads"] * hd, h, bias=False)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)


class Norm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn, self.mlp = Attn(c), Mlp(c)
        self.input_layernorm = Norm(c["hidden_size"])
        self.post_attention_layernorm = Norm(c["hidden_size"])


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = Norm(c["hidden_size"])
        # As transformers' rotary embedding: computed, in no checkpoint.
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, c["head_dim"], 2).float() / c["head_dim"]))
        self.register_buffer("inv_freq", inv, persistent=False)


class Net(nn.Module):
    base_model_prefix = "model"

    def __init__(self, c, tied=False):
        super().__init__()
        self.model = Inner(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids):
        x = self.model.embed_tokens(ids).float()
        for layer in self.model.layers:
            a = layer.self_attn
            x = x + a.o_proj(a.v_proj(x).repeat(1, a.q_proj.out_features // a.v_proj.out_features))
            x = x + layer.mlp.down_proj(layer.mlp.gate_proj(x) * layer.mlp.up_proj(x))
        return self.lm_head(x * self.model.norm.weight)


def build(m, dtype=torch.bfloat16, tied=False, meta=False):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        if meta:
            with wsrv.hf.init_empty_weights():
                return Net(m.config, tied)
        return Net(m.config, tied)
    finally:
        torch.set_default_dtype(old)


def test_cpu_views_are_zero_copy(client):
    with client.attach("llama") as m:
        net = build(m)
        res = wsrv.hf.load_into(net, m)
        assert res.missing_keys == [] and res.unexpected_keys == []
        for name, p in net.state_dict().items():
            assert p.data_ptr() == m[name].torch().data_ptr(), name
            assert torch.equal(p, m[name].torch())
        assert not any(p.requires_grad for p in net.parameters())


def test_meta_build_allocates_nothing_twice(client):
    with client.attach("llama") as m:
        net = build(m, meta=True)
        assert all(p.device.type == "meta" for p in net.parameters())
        assert net.model.inv_freq.device.type == "cpu"  # buffers stay real
        wsrv.hf.load_into(net, m)
        assert all(p.device.type == "cpu" for p in net.parameters())
        emb = net.model.embed_tokens.weight
        assert emb.data_ptr() == m["model.embed_tokens.weight"].torch().data_ptr()


def test_meta_buffer_is_refused_by_name(client):
    with client.attach("llama") as m:
        net = build(m, meta=True)
        # As torch.device("meta") builds it: the buffer on meta too.
        net.model.register_buffer("inv_freq", torch.empty(4, device="meta"), persistent=False)
        with pytest.raises(RuntimeError, match="inv_freq"):
            wsrv.hf.load_into(net, m)


def test_tied_embeddings_stay_tied(client):
    with client.attach("llama") as m:
        net = build(m, tied=True, meta=True)
        res = wsrv.hf.load_into(net, m)
        # The checkpoint also has lm_head.weight: embed_tokens wins, as
        # tie_weights makes it, and nothing is unexpected or missing.
        assert res.missing_keys == [] and res.unexpected_keys == []
        assert net.lm_head.weight is net.model.embed_tokens.weight
        assert torch.equal(net.lm_head.weight, m["model.embed_tokens.weight"].torch())


def test_dtype_cast_is_a_copy(client):
    with client.attach("llama") as m:
        net = build(m, dtype=torch.float32)
        wsrv.hf.load_into(net, m)
        q = "model.layers.0.self_attn.q_proj.weight"
        p = net.state_dict()[q]
        assert p.dtype == torch.float32
        assert torch.equal(p, m[q].torch().float())
        assert p.data_ptr() != m[q].torch().data_ptr()


def test_base_model_without_its_head(client):
    with client.attach("llama") as m:
        inner = Inner(m.config).to(torch.bfloat16)
        inner.base_model_prefix = "model"
        res = wsrv.hf.load_into(inner, m, strict=False)
        assert res.missing_keys == []
        assert res.unexpected_keys == ["lm_head.weight"]
        assert torch.equal(inner.norm.weight, m["model.norm.weight"].torch())
        with pytest.raises(RuntimeError, match="unexpected keys"):
            wsrv.hf.load_into(Inner(m.config).to(torch.bfloat16), m)


def test_tp_plan_takes_the_ranks_shard(client):
    plan = {"tp_plan": {"layers.*.self_attn.q_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise"}}
    with client.attach("llama") as m:
        c = dict(m.config)
        c["num_attention_heads"] //= 2
        net = build(m)
        net_r1 = Net(c).to(torch.bfloat16)
        # o_proj's input halves, but Attn makes it [h, heads*hd]: halve by hand.
        for layer in net_r1.model.layers:
            layer.self_attn.o_proj = nn.Linear(c["num_attention_heads"] * c["head_dim"], c["hidden_size"],
                                               bias=False).to(torch.bfloat16)
        wsrv.hf.load_into(net_r1, m, plan=plan, rank=1, world=2)
        full = m["model.layers.0.self_attn.q_proj.weight"].torch()
        half = full.shape[0] // 2
        assert torch.equal(net_r1.model.layers[0].self_attn.q_proj.weight, full[half:])
        o = m["model.layers.0.self_attn.o_proj.weight"].torch()
        assert torch.equal(net_r1.model.layers[0].self_attn.o_proj.weight, o[:, o.shape[1] // 2:])
        with pytest.raises(RuntimeError, match="shape"):
            wsrv.hf.load_into(net, m, plan=plan, rank=1, world=2)


def test_missing_keys_and_strict(client):
    with client.attach("llama") as m:
        net = build(m)
        net.extra = nn.Linear(2, 2, bias=False)
        with pytest.raises(RuntimeError, match="missing keys"):
            wsrv.hf.load_into(net, m)
        res = wsrv.hf.load_into(net, m, strict=False)
        assert res.missing_keys == ["extra.weight"] and res.unexpected_keys == []


def test_whole_plan_makes_every_tensor_resident(client):
    """load_into's device path streams nothing: every tensor is resident
    under its plan (with "*" alone the layers stayed streamed)."""
    with client.attach("llama") as m, m.stream("host", plan=wsrv.hf.WHOLE_PLAN) as s:
        assert set(s.resident()) == set(m)


def test_forward_equals_the_state_dicts(client):
    ids = torch.tensor([1, 5, 9])
    with client.attach("llama") as m:
        a = build(m, dtype=torch.float32)
        wsrv.hf.load_into(a, m)
        b = build(m, dtype=torch.float32)
        b.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
        with torch.no_grad():
            assert torch.equal(a(ids), b(ids))


def test_hf_llama_example(server):
    """The example builds transformers' LlamaForCausalLM and generates
    where transformers is importable; elsewhere (Debian) it exits 77 and
    says why."""
    import os
    import subprocess
    import sys

    example = os.path.join(os.path.dirname(wsrv.__file__), "..", "examples", "hf_llama.py")
    r = subprocess.run([sys.executable, example, "--socket", server.sock, "--model", "llama",
                        "--tokens", "3"], capture_output=True, text=True, timeout=300)
    try:
        import transformers  # noqa: F401  (only whether it imports)
    except ImportError:
        assert r.returncode == 77, r.stderr
        assert "transformers cannot be imported" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert "loaded: 0 missing, 0 unexpected" in r.stdout
    ids = r.stdout.split("ids ")[1].strip().split(",")
    assert len(ids) == 3
