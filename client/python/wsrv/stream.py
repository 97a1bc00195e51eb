# SPDX-License-Identifier: MIT
"""Layer streams: `for layer in stream:` yields each layer's tensors on the
device, acquired, and releases it when the loop moves on."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from . import _dtypes
from ._attached import AttachedModel, Layer, _ModelHandle
from ._lib import (CudaOpts, ExpertStats, HostOpts, Sharing, StreamOpts, StreamStats, View,
                   check, cstr, lib, new, rank_world, text, whole)
from ._views import array_of, bytes_view, torch_of
from .plan import Plan

if TYPE_CHECKING:
    import torch

    from .plan import PlanSpec

#: Expert ids: an int, a sequence of ints, or an integer tensor or array.
ExpertIds = Any

SHARE = {None: 0, True: 2, False: 1}
ROLES = {0: "private", 1: "writer", 2: "reader"}
NOT_IN_VIEW, EXPERTS_ON_DEMAND = 3, 4
LAYER_ALL = -2147483647 - 1


def _ids(ids: ExpertIds) -> tuple[ctypes.Array[ctypes.c_uint32], int]:
    """Expert ids (ints, a list, a tensor) as a uint32 array."""
    dtype = getattr(ids, "dtype", None)
    if dtype is not None and (getattr(dtype, "is_floating_point", False) or
                              getattr(dtype, "kind", None) in ("f", "c")):
        raise TypeError(f"expert ids must be integers, not a tensor of {dtype}")
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)):
        ids = [ids]
    ids = [whole(i, "an expert id") for i in ids]
    if any(i < 0 or i >= 1 << 32 for i in ids):
        raise ValueError("expert ids are 0 to 2^32-1")
    return (ctypes.c_uint32 * max(len(ids), 1))(*ids), len(ids)


def open_raw(model_ptr: ctypes.c_void_p, dev_ptr: Optional[ctypes.c_void_p], plan: Optional[Plan],
             opts: ctypes.Structure) -> ctypes.c_void_p:
    """wsrv_stream_open: the stream's pointer (the caller closes it)."""
    s = ctypes.c_void_p()
    check(lib.wsrv_stream_open(model_ptr, dev_ptr, plan.ptr if plan else None, ctypes.byref(opts),
                               ctypes.byref(s)), "stream")
    return s


def _device(spec: str, bandwidth_gbps: float, device_name: Optional[str], numa_node: int,
            compute_stream: Optional[int]) -> ctypes.c_void_p:
    d = ctypes.c_void_p()
    if spec == "host":
        o = new(HostOpts, numa_node=numa_node, bandwidth_gbps=bandwidth_gbps,
                device_name=cstr(device_name, "device_name") if device_name else None)
        check(lib.wsrv_device_host(ctypes.byref(o), ctypes.byref(d)), "host device")
    elif spec == "cuda" or spec.startswith("cuda:"):
        o = new(CudaOpts, device=int(spec[5:] or 0) if ":" in spec else 0,
                compute_stream=compute_stream)
        check(lib.wsrv_device_cuda(ctypes.byref(o), ctypes.byref(d)), "cuda device")
    else:
        raise ValueError(f"device {spec!r}: 'host', 'cuda' or 'cuda:N'")
    return d


class _StreamHandle:
    """Owns the stream, its device and plan; every tensor handed out holds
    it, so device memory outlives the views of it."""

    def __init__(self, model_h: _ModelHandle, plan: Optional[Plan]) -> None:
        self.model_h, self.plan = model_h, plan
        self.s: Optional[ctypes.c_void_p] = None
        self.d: Optional[ctypes.c_void_p] = None

    def __del__(self) -> None:
        if self.s:
            lib.wsrv_stream_close(self.s)
        if self.d:
            lib.wsrv_device_destroy(self.d)
        self.s = self.d = None


class _CudaArray:
    """__cuda_array_interface__ (version 2) over a device pointer. Its
    read-only flag is False: torch refuses an array that says True ("the
    read only flag is not supported"; seen on torch 2.11 on an H100). The
    tensors are still not to be written: a shared region is mapped
    read-only by the driver (a write into it faults), and a slot is
    overwritten by the next layer it holds."""

    def __init__(self, owner: _StreamHandle, ptr: int, shape: tuple[int, ...], typestr: str) -> None:
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "version": 2, "strides": None}


class StreamLayer(Mapping[str, "torch.Tensor"]):
    """An acquired layer: its tensors on the device, by name (routed
    experts on demand come from .experts)."""

    def __init__(self, stream: Stream, index: int, names: list[str],
                 experts: Optional[dict[int, list[str]]] = None) -> None:
        self.index = index
        self._stream, self._names = stream, names
        self._names_set = frozenset(names)
        self._experts = experts or {}

    @property
    def expert_ids(self) -> list[int]:
        """The ids of this layer's experts on demand that this rank owns."""
        return sorted(self._experts)

    def release_experts(self) -> None:
        """Lets go of the experts this layer holds (they stay cached until
        evicted); the layer's release does it too."""
        check(lib.wsrv_stream_release_experts(self._stream._ptr(), self.index))

    def experts(self, ids: ExpertIds) -> dict[str, torch.Tensor]:
        """The routed experts ids of this layer (ints, or a tensor of
        them) on the device, held until the layer is released: their
        tensors (FP8 scales included) by full name. Hits cost nothing;
        misses are copied from the host's one copy."""
        arr, n = _ids(ids)
        check(lib.wsrv_stream_acquire_experts(self._stream._ptr(), self.index, arr, n, None),
              f"experts of layer {self.index}")
        return {nm: self._stream.tensor(nm) for i in dict.fromkeys(arr[:n]) for nm in self._experts.get(i, ())}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names_set:
            raise KeyError(name)
        return self._stream.tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class Stream:
    """A layer stream over a Model on device "host" or "cuda[:N]" with a
    plan, D slots, a rank and world (tp_plan), share (None: the default,
    on unless the plan says no; False: a private copy; True: on)."""

    def __init__(self, model: AttachedModel, device: str = "host", plan: Union[Plan, PlanSpec, None] = None,
                 slots: int = 2, rank: int = 0, world: int = 1, share: Optional[bool] = None,
                 bandwidth_gbps: float = 0.0, device_name: Optional[str] = None, numa_node: int = -1,
                 compute_stream: Optional[int] = None) -> None:
        rank, world = rank_world(rank, world)
        self.model, self.device = model, device
        h = _StreamHandle(model._handle(), Plan.of(plan))
        self._h: Optional[_StreamHandle] = h
        h.d = _device(device, bandwidth_gbps, device_name, numa_node, compute_stream)
        opts = new(StreamOpts, slots=slots, rank=rank, world=world, share=SHARE[share])
        h.s = open_raw(model._ptr(), h.d, h.plan, opts)
        self._names = list(model)
        self._index = {nm: i for i, nm in enumerate(self._names)}
        self._layers = [l for l in model.layers() if l.index >= 0]
        self._codes: dict[int, int] = {}
        self._split: dict[int, tuple[list[str], dict[int, list[str]]]] = {}

    def _handle(self) -> _StreamHandle:
        if self._h is None or not self._h.s:
            raise ValueError("the stream is closed")
        return self._h

    def _ptr(self) -> ctypes.c_void_p:
        s = self._handle().s
        assert s is not None
        return s

    def tensor(self, name: str) -> torch.Tensor:
        """A tensor on the device: resident ones always, streamed ones while
        their layer is acquired (WsrvError EAGAIN otherwise). Valid until
        its layer is released (streamed) or the stream closes."""
        i = self._index[name]
        v, dev = new(View), ctypes.c_void_p()
        check(lib.wsrv_stream_view(self._ptr(), i, ctypes.byref(v)))
        check(lib.wsrv_stream_tensor_at(self._ptr(), i, ctypes.byref(dev)), name)
        shape = tuple(v.shape[k] for k in range(v.rank))
        code = self._codes.get(i)
        if code is None:
            code = self._codes[i] = self.model._tensor_at(i)._code
        if self.device == "host":
            a = array_of(bytes_view(self._handle(), dev.value or 0, v.bytes), code, shape, v.bytes, True)
            return torch_of(a, code)
        return self._cuda_tensor(dev.value or 0, shape, code, v.bytes)

    def _cuda_tensor(self, ptr: int, shape: tuple[int, ...], code: int, nbytes: int) -> torch.Tensor:
        import torch

        carrier: np.dtype[Any] = np.dtype(_dtypes.carrier(code) if _dtypes.torch_dtype(code) else np.uint8)
        if _dtypes.torch_dtype(code) is None:
            shape = shape if _dtypes.itemsize(code) == 1 else (nbytes,)
        t = torch.as_tensor(_CudaArray(self._handle(), ptr, shape, carrier.str), device="cuda")
        want = _dtypes.torch_dtype(code)
        return t.view(want) if want is not None and t.dtype != want else t

    def resident(self) -> dict[str, torch.Tensor]:
        """Every resident tensor on the device, by name."""
        return {nm: self.tensor(nm) for i, nm in enumerate(self._names)
                if lib.wsrv_stream_residency(self._ptr(), i) == 1}

    def __iter__(self) -> Iterator[StreamLayer]:
        """One pass: each numbered layer acquired in turn, released when the
        loop moves on (or leaves)."""
        for layer in self._layers:
            check(lib.wsrv_stream_acquire(self._ptr(), layer.index), f"acquire layer {layer.index}")
            names, experts = self._split_of(layer)
            try:
                yield StreamLayer(self, layer.index, names, experts)
            finally:
                if experts:
                    lib.wsrv_stream_release_experts(self._ptr(), layer.index)
                lib.wsrv_stream_release(self._ptr(), layer.index)

    def _split_of(self, layer: Layer) -> tuple[list[str], dict[int, list[str]]]:
        """A layer's tensors in this stream's view, and its experts on
        demand by id: placed at open, so worked out once per layer, not
        per pass (a Kimi-K2 layer has 2,300 expert tensors)."""
        got = self._split.get(layer.index)
        if got is None:
            ptr, names = self._ptr(), []
            experts: dict[int, list[str]] = {}
            for nm in layer.names:
                r = lib.wsrv_stream_residency(ptr, self._index[nm])
                if r == EXPERTS_ON_DEMAND:
                    experts.setdefault(int(nm.split(".experts.")[1].split(".")[0]), []).append(nm)
                elif r != NOT_IN_VIEW:
                    names.append(nm)
            got = self._split[layer.index] = (names, experts)
        return got

    def prefetch_experts(self, layer: int, ids: ExpertIds) -> None:
        """Starts copying experts of a later layer (a router's guess, the
        last token's routing) without waiting."""
        arr, n = _ids(ids)
        check(lib.wsrv_stream_prefetch_experts(self._ptr(), layer, arr, n), f"prefetch layer {layer}")

    def pin_experts(self, layer: int, ids: ExpertIds, pin: bool = True) -> None:
        """Keeps experts in the cache (pin=False lets them go back to LRU)."""
        arr, n = _ids(ids)
        check(lib.wsrv_stream_pin_experts(self._ptr(), layer, arr, n, 1 if pin else 0),
              f"pin experts of layer {layer}")

    def experts_resident(self, layer: int) -> list[int]:
        """The experts of a layer now in the cache, ascending."""
        n = ctypes.c_size_t()
        check(lib.wsrv_stream_experts_resident(self._ptr(), layer, None, 0, ctypes.byref(n)))
        arr = (ctypes.c_uint32 * max(n.value, 1))()
        check(lib.wsrv_stream_experts_resident(self._ptr(), layer, arr, n.value, ctypes.byref(n)))
        return list(arr[:n.value])

    def expert_stats(self, layer: Optional[int] = None) -> dict[str, Any]:
        """The expert cache's counters (wsrv_stream_expert_stats), for one
        layer or all."""
        st = new(ExpertStats)
        check(lib.wsrv_stream_expert_stats(self._ptr(), LAYER_ALL if layer is None else layer,
                                           ctypes.byref(st)))
        return {fd[0]: getattr(st, fd[0]) for fd in ExpertStats._fields_
                if fd[0] not in ("struct_size", "reserved")}

    def stats(self) -> dict[str, Any]:
        """The stream's counters (wsrv_stream_stats) and how it shares."""
        st, sh = new(StreamStats), new(Sharing)
        check(lib.wsrv_stream_stats(self._ptr(), ctypes.byref(st)))
        check(lib.wsrv_stream_sharing(self._ptr(), ctypes.byref(sh)))
        out = {fd[0]: getattr(st, fd[0]) for fd in StreamStats._fields_ if fd[0] != "struct_size"}
        out.update(share=ROLES.get(sh.role, "?"), share_note=text(sh.note),
                   share_device=text(sh.device), region_bytes=sh.region_bytes)
        return out

    def report(self) -> None:
        """Sends the counters to the server (wsrvctl stats)."""
        check(lib.wsrv_stream_report(self._ptr()))

    def close(self) -> None:
        """Closes once no tensor of it is left (they keep it alive)."""
        self._h = None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
