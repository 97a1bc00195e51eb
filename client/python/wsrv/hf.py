# SPDX-License-Identifier: MIT
"""A served model's tensors into a torch module in one call, by parameter
name, as transformers' from_pretrained puts a checkpoint into its model:

    import wsrv, wsrv.hf, transformers
    with wsrv.hf.init_empty_weights():
        net = transformers.LlamaForCausalLM(config)       # nothing allocated
    with wsrv.connect() as c, c.attach("llama") as m:
        missing, unexpected = wsrv.hf.load_into(net, m)   # zero-copy views

Works on any torch.nn.Module whose state_dict names are the checkpoint's
(transformers' are), with or without the base model's prefix."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    import torch

    from .model import Model
    from .plan import PlanSpec

# Every tensor resident: a plan's "*" is one dot-free component of a module
# path, so one pattern per depth ("*" alone left every layer streamed, and
# load_into(device="cuda") found them missing: seen on an H100).
WHOLE_PLAN: dict[str, Any] = {"residency": {".".join(["*"] * n): "resident" for n in range(1, 13)}}


@contextlib.contextmanager
def init_empty_weights() -> Iterator[None]:
    """Modules built inside have their parameters on the meta device (no
    memory) and their buffers where they would be (computed, as rotary
    frequencies are, since no checkpoint holds them): what accelerate's
    init_empty_weights does, which load_into then fills."""
    import torch

    register = torch.nn.Module.register_parameter

    def on_meta(self: torch.nn.Module, name: str, param: Optional[torch.nn.Parameter]) -> None:
        register(self, name, param)
        if param is not None and param.device.type != "meta":
            p = self._parameters[name]
            assert p is not None
            self._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    setattr(torch.nn.Module, "register_parameter", on_meta)
    try:
        yield
    finally:
        setattr(torch.nn.Module, "register_parameter", register)


def _prefix_fixed(names: set[str], sd: Mapping[str, torch.Tensor],
                  prefix: str) -> dict[str, torch.Tensor]:
    """sd's keys as the module names them: the base model's prefix added or
    removed where the module and the checkpoint disagree (a LlamaModel
    from a LlamaForCausalLM checkpoint, and back)."""
    if not prefix or any(k in names for k in sd):
        return dict(sd)
    p = prefix + "."
    if all(n.startswith(p) for n in names) or any(p + k in names for k in sd):
        return {p + k: v for k, v in sd.items()}
    if any(k.startswith(p) and k[len(p):] in names for k in sd):
        return {k[len(p):] if k.startswith(p) else k: v for k, v in sd.items()}
    return dict(sd)


def _tied_groups(want: Mapping[str, torch.Tensor]) -> dict[str, list[str]]:
    """Names that share one parameter object (tied weights), by each name,
    from state_dict(keep_vars=True), which names a tied one under each."""
    import torch

    by_obj: dict[int, list[str]] = {}
    for n, p in want.items():
        if isinstance(p, torch.nn.Parameter):
            by_obj.setdefault(id(p), []).append(n)
    return {n: names for names in by_obj.values() for n in names}


def _owner(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The submodule that holds name's last component, and that component."""
    path, _, leaf = name.rpartition(".")
    return (module.get_submodule(path) if path else module), leaf


def _placed(t: torch.Tensor, want: Optional[torch.dtype],
            device: Optional[torch.device]) -> torch.Tensor:
    """t as the module wants it: its dtype (a cast is a copy), on device."""
    if want is not None and t.is_floating_point() and want.is_floating_point and t.dtype != want:
        t = t.to(want)
    if device is not None and t.device != device:
        t = t.to(device)
    return t


def _put(module: torch.nn.Module, name: str, t: torch.Tensor, tied: dict[str, list[str]]) -> None:
    """Sets name (and every name tied to it) to t: a parameter stays a
    parameter (requires_grad off: the bytes are the server's, read-only),
    a buffer a buffer."""
    import torch

    param: Optional[torch.nn.Parameter] = None
    for n in tied.get(name, [name]):
        sub, leaf = _owner(module, n)
        if leaf in sub._parameters:
            param = param if param is not None else torch.nn.Parameter(t, requires_grad=False)
            sub._parameters[leaf] = param  # one object for every tied name
        else:
            sub._buffers[leaf] = t


def _check_shape(name: str, have: torch.Tensor, t: torch.Tensor) -> None:
    if tuple(have.shape) != tuple(t.shape):
        raise RuntimeError(f"wsrv.hf.load_into: {name}: the checkpoint has shape {tuple(t.shape)}, "
                           f"the module {tuple(have.shape)} (another rank's shard, or another model?)")


def _source(model: Model, plan: Optional[PlanSpec], rank: int, world: int,
            device: Optional[torch.device]) -> Mapping[str, torch.Tensor]:
    """name -> tensor: CPU views of the shared mapping; on a CUDA device,
    a stream holding every tensor resident there (one registered copy of
    each, faster than a pageable .to()), kept alive by its tensors."""
    import torch

    if device is not None and device.type == "cuda":
        p: dict[str, Any] = dict(plan) if isinstance(plan, dict) else {}
        if plan is not None and not isinstance(plan, dict):
            raise TypeError("wsrv.hf: on a cuda device the plan is a dict (its residency is extended)")
        p["residency"] = {**WHOLE_PLAN["residency"], **p.get("residency", {})}
        s = model.stream(f"cuda:{device.index or 0}", plan=p, rank=rank, world=world)
        out = s.resident()
        torch.cuda.synchronize(device)
        return out
    return model.state_dict(plan, rank, world)


def load_into(module: torch.nn.Module, model: Model, plan: Optional[PlanSpec] = None, rank: int = 0,
              world: int = 1, device: Union[str, torch.device, None] = None,
              strict: bool = True) -> Any:
    """Puts model's tensors (a wsrv.Model; rank's shard under plan's
    tp_plan) into module by name, and returns (missing_keys,
    unexpected_keys) as module.load_state_dict does; strict raises on
    either, as it does.

    - CPU parameters become zero-copy views of the shared mapping where the
      dtype matches (read-only memory: requires_grad is off); a dtype the
      module asks for is a cast, a copy.
    - device= (or a module whose parameters are on a GPU) copies each
      tensor to that device once, through a cuda stream that holds them.
    - A module built on the meta device (init_empty_weights, or
      torch.device("meta")) is filled without allocating twice.
    - Tied weights (lm_head to embed_tokens) are satisfied by either name
      and stay tied; buffers the checkpoint lacks (rotary frequencies) are
      the module's own, and not missing unless its state_dict has them.
    - A persistent buffer or parameter still on the meta device after the
      load is an error naming it: nothing could give it a value."""
    import torch

    want = module.state_dict(keep_vars=True)
    dev = torch.device(device) if device is not None else None
    if dev is None:
        on = {v.device for v in want.values() if v.device.type not in ("meta", "cpu")}
        dev = on.pop() if len(on) == 1 else None
    if dev is not None and dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    sd = _prefix_fixed(set(want), _source(model, plan, rank, world, dev),
                       getattr(module, "base_model_prefix", ""))
    tied = _tied_groups(want)
    done: set[str] = set()
    # In the module's order: of tied names, the first set wins (embed_tokens
    # over an lm_head the checkpoint also holds, as tie_weights does).
    for name in want:
        if name in done or name not in sd:
            continue
        t = sd[name]
        _check_shape(name, want[name], t)
        _put(module, name, _placed(t, want[name].dtype, dev), tied)
        done.update(tied.get(name, [name]))
    unexpected = [k for k in sd if k not in want]
    missing = [n for n in want if n not in done]
    if dev is not None:
        _move_buffers(module, dev)
    _refuse_meta(module, missing)
    if strict and (missing or unexpected):
        raise RuntimeError(f"wsrv.hf.load_into: missing keys {missing[:8]}{'...' if len(missing) > 8 else ''}, "
                           f"unexpected keys {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}")
    return torch.nn.modules.module._IncompatibleKeys(missing, unexpected)


def _move_buffers(module: torch.nn.Module, dev: torch.device) -> None:
    """The module's own buffers (rotary frequencies: in no checkpoint) go
    where its weights went, as from_pretrained's device_map takes them."""
    for name, b in list(module.named_buffers()):
        if b.device.type != "meta" and b.device != dev:
            sub, leaf = _owner(module, name)
            sub._buffers[leaf] = b.to(dev)


def _refuse_meta(module: torch.nn.Module, missing: list[str]) -> None:
    """Nothing may be left on the meta device: a forward pass would fail
    far from here."""
    left = [n for n, v in list(module.named_parameters()) + list(module.named_buffers())
            if v.device.type == "meta"]
    if left:
        raise RuntimeError(f"wsrv.hf.load_into: {', '.join(left[:8])} still on the meta device: "
                           f"{'not in the checkpoint' if set(left) & set(missing) else 'a buffer built on meta'}"
                           " (build the module with wsrv.hf.init_empty_weights(), which keeps buffers real)")

