# SPDX-License-Identifier: MIT
"""One vLLM engine (CPU build) in a process of its own, driven by the
engine tests over stdin and stdout, one JSON object a line after
"WSRV-ENGINE " (vLLM's log lines pass by):

    engine.py DIR [--socket S --model NAME]   (the wsrv loader; else vLLM's default)

It starts the engine (worker extension wsrv.vllm.WorkerExtension with the
wsrv loader), prints {"ready": seconds from start to the first token,
"tokens": [...], "param_bytes": ..., "pid": ...}, then answers each line it
reads: "tokens" (the greedy tokens again), "update" (wsrv.vllm.update:
{"generations": [...], "seconds": ...}), "quit"."""

import argparse
import json
import os
import sys
import time

# Three prompts as token ids; the third fills more than a KV block, so that
# a prefix cache kept across an update would show.
PROMPTS = [[1, 2, 3, 4], [100, 200, 300], [(7 * i) % 4000 + 5 for i in range(200)]]
STEPS = 24


MARK = "WSRV-ENGINE "  # vLLM logs to stdout too: our lines carry this


def say(**kw):
    print(MARK + json.dumps(kw), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--socket")
    ap.add_argument("--model")
    a = ap.parse_args()
    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    kw = dict(skip_tokenizer_init=True, dtype="bfloat16", max_model_len=512, enforce_eager=True, max_num_seqs=4,
              seed=0)
    if a.socket:
        kw.update(load_format="wsrv", model_loader_extra_config={"socket": a.socket, "model": a.model},
                  worker_extension_cls="wsrv.vllm.WorkerExtension")
    llm = LLM(model=a.dir, **kw)

    def tokens(max_tokens=STEPS):
        p = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        out = llm.generate([{"prompt_token_ids": t} for t in PROMPTS], p, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in out]

    tokens(1)
    ready = time.monotonic() - t0
    params = llm.collective_rpc("wsrv_param_bytes") if a.socket else []
    say(ready=ready, tokens=tokens(), param_bytes=params, pid=os.getpid())
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "tokens":
            say(tokens=tokens())
        elif cmd == "update":
            import wsrv.vllm

            t = time.monotonic()
            gens = wsrv.vllm.update(llm)
            say(generations=gens, seconds=time.monotonic() - t)
        elif cmd == "quit":
            break


if __name__ == "__main__":
    main()
