# SPDX-License-Identifier: MIT
"""An AsyncLLM (what `vllm serve` runs) on the wsrv loader, updated while
a request runs, for the engine tests:

    engine_async.py DIR --socket S --model NAME

It starts the engine and says so after "WSRV-ENGINE " ({"before": the
generation it serves}); at a line on stdin (the test has published a new
generation meanwhile) it starts the long prompt of engine.py's three and,
once its first token is out, runs wsrv.vllm.update_async (mode "wait")
beside it; when both are done it generates engine.py's prompts again and
prints {"inflight": the running request's tokens, "after": the prompts'
tokens, "generations": [...]}."""

import argparse
import asyncio
import json
import sys

from engine import MARK, PROMPTS, STEPS


async def run(a):
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    import wsrv.vllm

    args = AsyncEngineArgs(model=a.dir, load_format="wsrv",
                           model_loader_extra_config={"socket": a.socket, "model": a.model},
                           worker_extension_cls="wsrv.vllm.WorkerExtension", skip_tokenizer_init=True,
                           dtype="bfloat16", max_model_len=512, enforce_eager=True, max_num_seqs=4, seed=0)
    engine = AsyncLLM.from_engine_args(args)
    sp = SamplingParams(temperature=0, max_tokens=STEPS, ignore_eos=True)
    try:
        before = (await engine.collective_rpc("wsrv_generation"))[0]
        print(MARK + json.dumps({"before": before}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        first = asyncio.Event()

        async def inflight():
            out = None
            async for out in engine.generate({"prompt_token_ids": PROMPTS[2]}, sp, "inflight"):
                first.set()
            return list(out.outputs[0].token_ids)

        task = asyncio.create_task(inflight())
        await first.wait()
        gens = await wsrv.vllm.update_async(engine, mode="wait")
        running = await task
        after = []
        for i, p in enumerate(PROMPTS):
            out = None
            async for out in engine.generate({"prompt_token_ids": p}, sp, f"after-{i}"):
                pass
            after.append(list(out.outputs[0].token_ids))
        print(MARK + json.dumps({"inflight": running, "after": after, "generations": gens}), flush=True)
    finally:
        engine.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--model", required=True)
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
