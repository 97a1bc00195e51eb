#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""transformers' own LlamaForCausalLM on weights served by wsrv: built from
the served model's config.json on the meta device (nothing allocated),
filled by wsrv.hf.load_into (zero-copy views of the shared mapping on the
CPU; one copy to the GPU with --device cuda), then greedy generation.

    python3 hf_llama.py --socket S --model demo --prompt-ids 1,2,3 --tokens 16

prints the generated ids. Exits 77, saying why, where transformers cannot
be imported (Debian packages no transformers)."""

import argparse
import os
import sys

import torch


def build(tf, config, dtype):
    """LlamaForCausalLM with its parameters on meta, in dtype."""
    import wsrv.hf

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with wsrv.hf.init_empty_weights():
            return tf.LlamaForCausalLM(tf.LlamaConfig(**config))
    finally:
        torch.set_default_dtype(old)


def greedy(net, prompt, n, device):
    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        for _ in range(n):
            nxt = net(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], 1)
    return ids[0, len(prompt):].tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", default="1,2,3")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--device", default=None, help="cpu (default: zero-copy) or cuda[:N]")
    a = ap.parse_args()
    try:
        import transformers as tf
    except ImportError as e:
        print(f"hf_llama.py: transformers cannot be imported ({e}): it is not packaged in "
              "Debian; pip install transformers to run this example", file=sys.stderr)
        sys.exit(77)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import wsrv
    import wsrv.hf

    with wsrv.connect(a.socket, name="hf_llama.py") as c, c.attach(a.model) as m:
        dtype = getattr(torch, m.config.get("torch_dtype", "bfloat16"))
        net = build(tf, m.config, dtype)
        res = wsrv.hf.load_into(net, m, device=a.device)
        print(f"loaded: {len(res.missing_keys)} missing, {len(res.unexpected_keys)} unexpected")
        ids = greedy(net.eval(), [int(x) for x in a.prompt_ids.split(",")], a.tokens,
                     a.device or "cpu")
        print("ids", ",".join(map(str, ids)))


if __name__ == "__main__":
    main()
