# SPDX-License-Identifier: MIT
"""vLLM takes its weights from wsrvd (docs/engines.md).

- The model loader `wsrv`, registered in every vLLM process by the
  `vllm.general_plugins` entry point (`register`):
  `LLM(model=DIR, load_format="wsrv",
  model_loader_extra_config={"socket": PATH, "model": NAME})`. DIR holds the
  config (and tokenizer); no weight file is opened. The served tensors go
  to vLLM's own `load_weights` as zero-copy views of the shared mapping,
  so its post-processing (fused qkv and gate_up, quantized layouts) runs as
  with its own loader, and a tensor-parallel rank's weight loader narrows
  each whole tensor to its shard before copying: only the shard's bytes
  are read.
- The worker extension `WorkerExtension`:
  `LLM(..., worker_extension_cls="wsrv.vllm.WorkerExtension")`, then
  `llm.collective_rpc("wsrv_update")` moves every worker to the newest
  generation wsrvd serves (a trainer's publish), in place, through vLLM's
  `reload_weights`; each worker returns the generation it serves.

vLLM is imported only here, and only when these run: `import wsrv` never
imports it.
"""

from __future__ import annotations

import errno
import importlib
from typing import Any, Iterator, Optional

from .client import Client, connect
from .errors import WsrvError
from .model import Model

OPTIONS = {"socket": "wsrvd's socket (default: $WSRV_SOCKET, else wsrvd's default)",
           "model": "the model's name at wsrvd (default: the last part of the engine's model path)",
           "wait": "seconds to wait for wsrvd to answer (default 0)"}

# Keys of config.json that fix the weights' names and shapes: the engine's
# config and the served model's must agree on each that both state.
SHAPE_KEYS = ("architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings", "n_routed_experts",
              "num_experts", "num_local_experts", "moe_intermediate_size", "first_k_dense_replace",
              "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def options(extra: Optional[dict[str, Any]], model_path: str) -> dict[str, Any]:
    """The loader's options from --model-loader-extra-config, checked: an
    unknown key is refused with the keys it takes."""
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(OPTIONS))
    if unknown:
        raise ValueError(f"wsrv loader: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in "
                         "--model-loader-extra-config; it takes " +
                         "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
    name = extra.get("model") or model_path.rstrip("/").rsplit("/", 1)[-1]
    return {"socket": extra.get("socket"), "model": str(name), "wait": float(extra.get("wait", 0))}


def _engine_config(hf_config: Any) -> dict[str, Any]:
    """The engine's config as a dict (a multimodal one's text part first)."""
    d: dict[str, Any] = dict(hf_config.to_dict() if hasattr(hf_config, "to_dict") else vars(hf_config))
    text = d.get("text_config")
    if isinstance(text, dict):
        return {**d, **text}
    return d


def check_config(served: dict[str, Any], engine: dict[str, Any], where: str, what: str) -> None:
    """Refuses, naming both, an engine whose config gives other names or
    shapes than the served model's (each key both state must agree)."""
    differ = [f"{k} {engine[k]!r} against {served[k]!r}" for k in SHAPE_KEYS
              if k in served and k in engine and served[k] is not None and engine[k] is not None
              and served[k] != engine[k]]
    if differ:
        raise ValueError(f"the engine's model {where} is not wsrvd's model {what}: its config.json says "
                         + "; ".join(differ) + " (the engine's first, wsrvd's second)")


class _Source:
    """One worker's connection to wsrvd and the generation it loaded."""

    def __init__(self, opts: dict[str, Any], where: str) -> None:
        self.opts = opts
        self.where = where
        self.client: Optional[Client] = None
        self.generation = 0

    @property
    def what(self) -> str:
        return f"'{self.opts['model']}' at {self.opts['socket'] or 'the default socket'}"

    def attach(self) -> Model:
        """The newest generation, whole (a model still loading is waited for)."""
        if self.client is None:
            self.client = connect(self.opts["socket"], name="vllm", wait=self.opts["wait"])
        try:
            m = self.client.attach(self.opts["model"])
        except WsrvError as e:
            if e.errno == errno.ENOENT:
                names = [d.get("name") for d in self.client.models()]
                raise WsrvError(e.errno, f"wsrvd has no model {self.what} for the engine's model {self.where} "
                                         f"(it serves {', '.join(map(str, names)) or 'none'}): set "
                                         "model_loader_extra_config's \"model\"") from None
            raise
        m.wait()
        return m

    def weights(self, m: Model) -> Iterator[tuple[str, Any]]:
        """(name, tensor) of every tensor, views of the shared mapping."""
        for name in m:
            yield name, m[name].torch()


def _feed(load: Any, src: _Source, m: Model) -> Any:
    """load(weights) over m's tensors, a refusal naming both models when
    the engine cannot take them (a name it lacks, a shape it does not
    expect)."""
    try:
        return load(src.weights(m))
    except (KeyError, AssertionError, RuntimeError, ValueError) as e:
        raise ValueError(f"the engine's model {src.where} cannot take wsrvd's model {src.what} "
                         f"(generation {m.generation}): {type(e).__name__}: {e}") from e


def _check_all_loaded(model: Any, loaded: Optional[set[str]], src: _Source) -> None:
    if loaded is None:
        return
    missing = sorted({n for n, _ in model.named_parameters()} - set(loaded))
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise ValueError(f"wsrvd's model {src.what} lacks what the engine's model {src.where} needs: "
                         f"{', '.join(missing[:4])}{more}")


def loader_class() -> type:
    """The loader class, derived from vLLM's BaseModelLoader (made on first
    use: importing wsrv imports no vLLM)."""
    base = importlib.import_module("vllm.model_executor.model_loader.base_loader").BaseModelLoader

    class WsrvModelLoader(base):  # type: ignore[valid-type,misc]
        """vLLM's `--load-format wsrv`."""

        def __init__(self, load_config: Any) -> None:
            super().__init__(load_config)
            self._extra = getattr(load_config, "model_loader_extra_config", None) or {}
            options(self._extra, "")  # unknown keys refused at once

        def _source(self, model_config: Any) -> _Source:
            src = _Source(options(self._extra, str(model_config.model)), str(model_config.model))
            return src

        def download_model(self, model_config: Any) -> None:
            """Nothing to download: the weights are wsrvd's."""

        def get_all_weights(self, model_config: Any, model: Any) -> Iterator[tuple[str, Any]]:
            """The newest generation's tensors (vLLM's reload_weights asks
            for them when given no iterator)."""
            src = self._source(model_config)
            m = src.attach()
            yield from src.weights(m)
            m.close()

        def load_weights(self, model: Any, model_config: Any) -> None:
            src = self._source(model_config)
            m = src.attach()
            try:
                check_config(m.config, _engine_config(model_config.hf_config), src.where, src.what)
                loaded = _feed(model.load_weights, src, m)
                if model_config.quantization is None:
                    _check_all_loaded(model, loaded, src)
                src.generation = m.generation
            finally:
                m.close()
            _SOURCES[id(model)] = src

    return WsrvModelLoader


# The source each loaded model came from (by id), for wsrv_update.
_SOURCES: dict[int, _Source] = {}


def register() -> None:
    """The `vllm.general_plugins` entry point: registers the loader `wsrv`
    in this process (each of vLLM's processes runs it)."""
    loader = importlib.import_module("vllm.model_executor.model_loader")
    if "wsrv" not in getattr(loader, "_LOAD_FORMAT_TO_MODEL_LOADER", {}):
        loader.register_model_loader("wsrv")(loader_class())


class WorkerExtension:
    """Methods vLLM adds to every worker (`worker_extension_cls`)."""

    model_runner: Any
    vllm_config: Any

    def wsrv_update(self) -> int:
        """Moves this worker's model to the newest generation wsrvd serves,
        in place (vLLM's reload_weights: its post-processing runs again on
        the new bytes); the generation it serves now. A generation that
        cannot be attached or taken leaves the old weights in place."""
        model = self.model_runner.get_model()
        src = _SOURCES.get(id(model))
        if src is None:
            raise ValueError("wsrv_update: this engine's weights were not loaded by load_format=\"wsrv\"")
        m = src.attach()
        try:
            if m.generation == src.generation:
                return src.generation
            check_config(m.config, _engine_config(self.model_runner.model_config.hf_config), src.where, src.what)
            self.model_runner.reload_weights(weights_iterator=src.weights(m), is_checkpoint_format=True)
            src.generation = m.generation
        finally:
            m.close()
        return src.generation

    def wsrv_param_bytes(self) -> int:
        """The bytes of this worker's parameters: what the engine holds of
        its own (vLLM copies the served bytes into them)."""
        model = self.model_runner.get_model()
        return sum(p.numel() * p.element_size() for p in model.parameters())

    def wsrv_generation(self) -> int:
        """The generation this worker's weights are (0: not wsrv's)."""
        src = _SOURCES.get(id(self.model_runner.get_model()))
        return src.generation if src else 0



def update(llm: Any) -> list[int]:
    """Every worker of a vLLM `LLM` moved to the newest generation wsrvd
    serves (wsrv_update), then its prefix cache dropped: KV blocks computed
    under the old weights are never reused under the new ones. The
    generation each worker serves. LLM's calls are serial: no request runs
    during it."""
    gens: list[int] = llm.collective_rpc("wsrv_update")
    if not llm.reset_prefix_cache():
        raise RuntimeError("wsrv update: the weights are new, but vLLM did not drop its prefix cache")
    return gens


async def update_async(engine: Any, mode: str = "wait") -> list[int]:
    """The same for an AsyncLLM (what `vllm serve` runs), around vLLM's
    pause_generation: new requests wait; those in flight finish on the
    weights they began with ("wait", the default), are aborted ("abort"),
    or are frozen until generation resumes ("keep", vLLM's); every worker
    is updated, the KV and prefix caches are cleared, and generation
    resumes. The generation each worker serves."""
    await engine.pause_generation(mode=mode, clear_cache=True)
    try:
        gens: list[int] = await engine.collective_rpc("wsrv_update")
    finally:
        await engine.resume_generation()
    return gens
