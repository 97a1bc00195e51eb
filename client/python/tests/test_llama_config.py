# SPDX-License-Identifier: MIT
"""The example Llama decoder follows config.json's rope_scaling and
hidden_act (rather than computing the plain model). Each scaling and activation is checked against a reference written
here, independently of the example: float64, no KV cache, the rotary
frequencies element by element from the formulas transformers uses. Each
must also change the logits against the plain config, so the check has
teeth; values the example does not implement are refused, naming the key
and the value."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

import llama
import wsrv
from conftest import Server, _mkmodel
from st_reader import read_model

EXAMPLE = os.path.join(os.path.dirname(llama.__file__), "llama.py")
PROMPT, N = [1, 2, 3], 8
TOLERANCE = 1e-4  # float32 against float64, relative to the largest logit


def ref_inv_freq(cfg, dim, seq_len):
    """Frequencies [dim/2] (float64) for a token first processed in a forward
    pass whose last position is seq_len - 1."""
    theta = float(cfg.get("rope_theta", 10000.0))
    sc = cfg.get("rope_scaling") or {}
    kind = sc.get("rope_type", sc.get("type", "default"))
    if kind == "dynamic":
        max_pos = cfg["max_position_embeddings"]
        if seq_len > max_pos:
            f = sc["factor"]
            theta = theta * ((f * seq_len / max_pos) - (f - 1)) ** (dim / (dim - 2))
    out = []
    for i in range(0, dim, 2):
        inv = theta ** (-i / dim)
        if kind == "linear":
            inv /= sc["factor"]
        elif kind == "llama3":
            f, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
            old = sc["original_max_position_embeddings"]
            wavelen = 2 * math.pi / inv
            if wavelen > old / lo:
                inv /= f
            elif wavelen >= old / hi:
                s = (old / wavelen - lo) / (hi - lo)
                inv = (1 - s) * inv / f + s * inv
        out.append(inv)
    return torch.tensor(out, dtype=torch.float64)


def ref_act(name, x):
    if name in ("silu", "swish"):
        return x / (1 + torch.exp(-x))
    if name == "gelu":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return x.clamp(min=0)
    raise AssertionError(name)


def ref_rotate(x, angles):
    """x [T, H, D] rotated by angles [T, D/2], in rotate-half form."""
    d = x.shape[-1]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :]
    return x * cos + torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1) * sin


def ref_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def ref_logits(cfg, w, ids, first):
    """Logits of the last of ids, everything computed again from the start;
    position j is rotated as when it was first processed (first[j])."""
    g = {k: v.double() for k, v in w.items()}
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim") or h // heads
    eps, act = cfg.get("rms_norm_eps", 1e-6), cfg.get("hidden_act", "silu")
    T = len(ids)
    ang = torch.stack([j * ref_inv_freq(cfg, hd, first[j]) for j in range(T)])
    x = g["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = ref_norm(x, g[p + "input_layernorm.weight"], eps)
        q = (a @ g[p + "self_attn.q_proj.weight"].T).view(T, heads, hd)
        k = (a @ g[p + "self_attn.k_proj.weight"].T).view(T, kvh, hd)
        v = (a @ g[p + "self_attn.v_proj.weight"].T).view(T, kvh, hd)
        q, k = ref_rotate(q, ang), ref_rotate(k, ang)
        out = torch.zeros(T, heads, hd, dtype=torch.float64)
        for hh in range(heads):
            kk, vv = k[:, hh * kvh // heads], v[:, hh * kvh // heads]
            s = (q[:, hh] @ kk.T) / math.sqrt(hd)
            s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            out[:, hh] = s.softmax(-1) @ vv
        x = x + out.reshape(T, heads * hd) @ g[p + "self_attn.o_proj.weight"].T
        a = ref_norm(x, g[p + "post_attention_layernorm.weight"], eps)
        m = ref_act(act, a @ g[p + "mlp.gate_proj.weight"].T) * (a @ g[p + "mlp.up_proj.weight"].T)
        x = x + m @ g[p + "mlp.down_proj.weight"].T
    x = ref_norm(x[-1:], g["model.norm.weight"], eps)
    head = g["model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"]
    return (x @ head.T)[0]


def ref_generate(cfg, w, prompt, n):
    ids, first, logits = list(prompt), [len(prompt)] * len(prompt), []
    for _ in range(n):
        lg = ref_logits(cfg, w, ids, first)
        logits.append(lg)
        ids.append(int(lg.argmax()))
        first.append(len(ids))
    return ids[len(prompt):], logits


@pytest.fixture(scope="module")
def plain(server):
    with wsrv.connect(server.sock) as c, c.attach("llama") as m:
        cfg = dict(m.config)
    return cfg, read_model(server.models["llama"])


CASES = {
    "linear": {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    "dynamic": {"rope_scaling": {"type": "dynamic", "factor": 2.0}, "max_position_embeddings": 4},
    "llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "gelu": {"hidden_act": "gelu"},
    "gelu_pytorch_tanh": {"hidden_act": "gelu_pytorch_tanh"},
    "relu": {"hidden_act": "relu"},
}


def largest_diff(a, b):
    x, y = torch.stack([t.double() for t in a]), torch.stack([t.double() for t in b])
    return ((x - y).abs().max() / y.abs().max()).item()


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference_and_differs_from_plain(plain, case):
    cfg, w = plain
    cfg = dict(cfg, **CASES[case])
    with torch.no_grad():
        ids, logits = llama.generate(llama.Config(cfg), llama.DictWeights(w), PROMPT, N)
        ref_ids, ref = ref_generate(cfg, w, PROMPT, N)
        _, base = llama.generate(llama.Config(plain[0]), llama.DictWeights(w), PROMPT, N)
    err = largest_diff(logits, ref)
    print(f"{case}: {err:.2e} of the largest logit from the reference")
    assert err < TOLERANCE, err
    assert ids == ref_ids
    assert largest_diff(logits, base) > 100 * TOLERANCE, "the config changed nothing"


def test_plain_matches_reference(plain):
    cfg, w = plain
    with torch.no_grad():
        ids, logits = llama.generate(llama.Config(cfg), llama.DictWeights(w), PROMPT, N)
        ref_ids, ref = ref_generate(cfg, w, PROMPT, N)
    assert largest_diff(logits, ref) < TOLERANCE
    assert ids == ref_ids


@pytest.mark.parametrize("extra,words", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ["rope_type", "'yarn'"]),
    ({"rope_scaling": {"rope_type": "linear"}}, ["rope_scaling.factor", "None"]),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, ["rope_scaling.low_freq_factor"]),
    ({"rope_scaling": "linear"}, ["rope_scaling", "'linear'"]),
    ({"hidden_act": "xielu"}, ["hidden_act", "'xielu'"]),
])
def test_unknown_values_refused(plain, extra, words):
    with pytest.raises(llama.ConfigError) as e:
        llama.Config(dict(plain[0], **extra))
    for word in words:
        assert word in str(e.value)


def run_example(sock, model):
    return subprocess.run([sys.executable, EXAMPLE, "--socket", sock, "--model", model,
                           "--prompt-ids", ",".join(map(str, PROMPT)), "--tokens", str(N)],
                          capture_output=True, text=True, timeout=120)


def test_served_model_with_scaling(tmp_path):
    """A model made by wsrv-mkmodel --rope-scaling llama3:8 --hidden-act gelu,
    served: the example's tokens are the reference's. One whose config asks
    for yarn is refused with a sentence, not computed."""
    good = _mkmodel(tmp_path / "scaled", "llama-mini", "8M", 2,
                    ["--rope-scaling", "llama3:8", "--hidden-act", "gelu"])
    bad = _mkmodel(tmp_path / "yarn", "llama-mini", "8M", 2,
                   ["--rope-scaling", '{"rope_type": "yarn", "factor": 4}'])
    cfg = json.load(open(os.path.join(good, "config.json")))
    assert cfg["rope_scaling"]["rope_type"] == "llama3" and cfg["hidden_act"] == "gelu"
    with torch.no_grad():
        ref_ids, _ = ref_generate(cfg, read_model(good), PROMPT, N)
    srv = Server(tmp_path, {"scaled": good, "yarn": bad})
    try:
        r = run_example(srv.sock, "scaled")
        assert r.returncode == 0, r.stderr
        assert f"ids {','.join(map(str, ref_ids))}" in r.stdout
        r = run_example(srv.sock, "yarn")
        assert r.returncode != 0
        assert "rope_scaling.rope_type 'yarn' is not supported" in r.stderr
    finally:
        srv.stop()
