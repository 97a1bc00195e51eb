# SPDX-License-Identifier: MIT
"""SGLang takes its weights from wsrvd (docs/engines.md): SGLang's
`get_model_loader` takes a loader class passed as the load format, so

    import sglang, wsrv.sglang
    engine = sglang.Engine(model_path=DIR, load_format=wsrv.sglang.loader_class(),
                           model_loader_extra_config={"socket": PATH, "model": NAME})

builds the model from DIR's config and feeds its own `load_weights` every
tensor wsrvd serves, as zero-copy views of the shared mapping, with the
same options, checks and refusals as the vLLM loader (wsrv.vllm). SGLang
is imported only when loader_class() is called.
"""

from __future__ import annotations

import importlib
from typing import Any

from .vllm import _check_all_loaded, _engine_config, _feed, _Source, check_config, options


def loader_class() -> type:
    """The loader class, derived from SGLang's BaseModelLoader."""
    loader = importlib.import_module("sglang.srt.model_loader.loader")
    torch = importlib.import_module("torch")

    class WsrvSGLangLoader(loader.BaseModelLoader):  # type: ignore[misc,name-defined]
        """SGLang's load format for wsrvd's weights."""

        def __init__(self, load_config: Any) -> None:
            super().__init__(load_config)
            self._extra = getattr(load_config, "model_loader_extra_config", None) or {}
            options(self._extra, "")  # unknown keys refused at once

        def download_model(self, model_config: Any) -> None:
            """Nothing to download: the weights are wsrvd's."""

        def load_model(self, *, model_config: Any, device_config: Any) -> Any:
            path = str(model_config.model_path)
            src = _Source(options(self._extra, path), path)
            m = src.attach()
            try:
                check_config(m.config, _engine_config(model_config.hf_config), src.where, src.what)
                quant = loader._get_quantization_config(model_config, self.load_config)
                with loader.set_default_torch_dtype(model_config.dtype):
                    with torch.device(device_config.device):
                        model = loader._initialize_model(model_config, self.load_config, quant)
                    loaded = _feed(model.load_weights, src, m)
                    if getattr(model_config, "quantization", None) is None:
                        _check_all_loaded(model, loaded, src)
                    for module in model.modules():
                        method = getattr(module, "quant_method", None)
                        if method is not None and hasattr(method, "process_weights_after_loading"):
                            method.process_weights_after_loading(module)
                src.generation = m.generation
            finally:
                m.close()
            return model.eval()

    return WsrvSGLangLoader
