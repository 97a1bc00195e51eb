# SPDX-License-Identifier: MIT
"""The SGLang adapter (wsrv.sglang) against SGLang's own loader interface
(sglang 0.5.23, installed beside vLLM by tools/vllm-venv: its engine needs
CUDA kernels this CPU cannot run, docs/engines.md). SGLang's
get_model_loader takes the class as the load format; load_model builds the
model through SGLang's own _initialize_model, here replaced by a module
that records what its load_weights is fed: every served tensor, bit for
bit, as zero-copy views; a config that is not wsrvd's model is refused
naming both, and unknown options at once."""

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_vllm import Wsrvd, config_only, mkmodel  # noqa: E402

import wsrv  # noqa: E402

loader_mod = pytest.importorskip("sglang.srt.model_loader.loader",
                                 reason="sglang is not in this venv (tools/vllm-venv installs it)")
import wsrv.sglang  # noqa: E402


class Recorder(torch.nn.Module):
    """A model whose load_weights keeps what it is fed."""

    def __init__(self, names):
        super().__init__()
        self.fed = {}
        for n in names:
            self.register_parameter(n.replace(".", "__"), torch.nn.Parameter(torch.zeros(1)))

    def load_weights(self, weights):
        for name, t in weights:
            self.fed[name] = t.clone()
        return {n for n, _ in self.named_parameters()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sglang")
    m = {"a": mkmodel(tmp / "a", "llama-mini", "8M", 2, 21), "other": mkmodel(tmp / "o", "llama-mini", "8M", 3, 22)}
    m["a_config"] = config_only(m["a"], tmp / "a-config")
    m["other_config"] = config_only(m["other"], tmp / "o-config")
    srv = Wsrvd(tmp, {"m": m["a"]})
    m["sock"] = srv.sock
    yield m
    srv.stop()


def configs(path, sock, extra=None):
    """SGLang's own configs for the model at path (its config.json alone)."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig

    cls = wsrv.sglang.loader_class()
    lc = LoadConfig(load_format=cls, model_loader_extra_config=extra or {"socket": sock, "model": "m"})
    return cls, lc, ModelConfig(model_path=path, dtype="bfloat16"), DeviceConfig("cpu")


def test_sglang_takes_the_class_as_its_load_format(served, monkeypatch):
    cls, lc, mc, dc = configs(served["a_config"], served["sock"])
    loader = loader_mod.get_model_loader(lc)
    assert isinstance(loader, cls) and isinstance(loader, loader_mod.BaseModelLoader)
    with wsrv.connect(served["sock"]) as c, c.attach("m") as m:
        names = list(m)
        want = {n: m[n].torch().clone() for n in names}
    monkeypatch.setattr(loader_mod, "_initialize_model", lambda mc_, lc_, q: Recorder(names))
    model = loader.load_model(model_config=mc, device_config=dc)
    assert set(model.fed) == set(want)
    for n, t in want.items():
        assert torch.equal(model.fed[n], t), n
    assert not model.training


def test_a_config_not_wsrvds_model_is_refused_naming_both(served, monkeypatch):
    cls, lc, mc, dc = configs(served["other_config"], served["sock"])
    monkeypatch.setattr(loader_mod, "_initialize_model", lambda *a: pytest.fail("built before the check"))
    with pytest.raises(ValueError) as e:
        loader_mod.get_model_loader(lc).load_model(model_config=mc, device_config=dc)
    assert "is not wsrvd's model 'm'" in str(e.value) and "num_hidden_layers 3 against 2" in str(e.value)


def test_unknown_options_refused_at_once(served):
    cls, lc, mc, dc = configs(served["a_config"], served["sock"], {"sock": served["sock"]})
    with pytest.raises(ValueError) as e:
        loader_mod.get_model_loader(lc)
    assert "unknown option sock" in str(e.value)
