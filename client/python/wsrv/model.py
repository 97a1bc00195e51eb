# SPDX-License-Identifier: MIT
"""An attached model: a read-only Mapping of tensor names to Tensors whose
.numpy() and .torch() are views of the shared mapping."""

from __future__ import annotations

import ctypes
import errno
import json
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional, Union

from . import _bulk, _dtypes
from ._attached import Layer, Tensor, _ModelHandle
from ._lib import (HeldInfo, LayerInfo, Layout, StreamOpts, TensorInfo, View, check, lib, new,
                   rank_world, cstr, text)
from .errors import WsrvError
from .plan import Plan
from .publish import Publish
from .stream import Stream, open_raw

if TYPE_CHECKING:
    import torch

    from .plan import PlanSpec


class StateDict(dict[str, "torch.Tensor"]):
    """A rank's tensors by name; .copied names the ones a layout forced to
    be copies (the rest are views of the shared mapping)."""

    def __init__(self) -> None:
        super().__init__()
        self.copied: set[str] = set()


def _names_of(ptr: ctypes.c_void_p, n: int) -> list[str]:
    """Every tensor's name, in one call into libwsrv (wsrv_model_names)."""
    need = ctypes.c_size_t()
    check(lib.wsrv_model_names(ptr, None, 0, ctypes.byref(need)))
    buf = ctypes.create_string_buffer(need.value + 1)
    check(lib.wsrv_model_names(ptr, buf, need.value + 1, ctypes.byref(need)))
    names = buf.raw[:need.value].decode("utf-8", "replace").split("\0")[:n]
    if len(names) != n:
        raise WsrvError(errno.EBADMSG, f"libwsrv gave {len(names)} names for {n} tensors")
    return names


class Model(Mapping[str, Tensor]):
    """An attached model (Client.attach). A context manager; close()
    detaches once the last view of it is gone."""

    def __init__(self, client_ptr: ctypes.c_void_p, name: str) -> None:
        ptr = ctypes.c_void_p()
        check(lib.wsrv_attach(client_ptr, cstr(name, "a model name"), ctypes.byref(ptr)), f"attach {name}")
        self.name = name
        self._client_ptr = client_ptr  # the model holds the C client's reference
        self._h: Optional[_ModelHandle] = _ModelHandle(ptr)
        n = lib.wsrv_model_tensor_count(ptr)
        # Names only: a model still loading does not wait here.
        self._names = _names_of(ptr, n)
        self._kinds: Any = None   # _bulk.kinds(self._names), at the first state_dict
        self._index = {nm: i for i, nm in enumerate(self._names)}
        self._config: Optional[dict[str, Any]] = None

    def _handle(self) -> _ModelHandle:
        if self._h is None or not self._h.ptr:
            raise WsrvError(9, f"model {self.name} is closed")  # EBADF
        return self._h

    def _ptr(self) -> ctypes.c_void_p:
        ptr = self._handle().ptr
        assert ptr is not None
        return ptr

    def _tensor_at(self, i: int) -> Tensor:
        ti = new(TensorInfo)
        check(lib.wsrv_model_tensor(self._ptr(), i, ctypes.byref(ti)))
        return Tensor(ti, self._handle())

    def __getitem__(self, name: str) -> Tensor:
        i = self._index.get(name)
        if i is None:
            raise KeyError(name)
        return self._tensor_at(i)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def tensor(self, name: str) -> Tensor:
        """The tensor by name; WsrvError(ENOENT) when there is none."""
        ti = new(TensorInfo)
        check(lib.wsrv_model_find(self._ptr(), cstr(name, "a tensor name"), ctypes.byref(ti)), name)
        return Tensor(ti, self._handle())

    def wait(self, layer: Optional[int] = None, timeout: Optional[float] = None,
             progress: bool = False) -> None:
        """Served while the server loads it (wsrvd's default):
        waits for one layer (-1: the global group) or, with None, for the
        whole model; timeout in seconds (None: for ever). WsrvError(EIO)
        names the tensor when the load failed, ETIMEDOUT on timeout.
        Tensor lookups, layers() and streams wait by themselves.
        progress=True (waiting for the whole model) prints how far the
        load is to stderr every 2 s ("wsrv: model m loading: 45% ...")."""
        if progress and layer is None:
            self._wait_reporting(timeout)
            return
        ms = -1 if timeout is None else int(timeout * 1000)
        lay = -2**31 if layer is None else layer
        check(lib.wsrv_model_wait(self._ptr(), lay, ms), f"wait for {self.name}")

    def _wait_reporting(self, timeout: Optional[float], every: float = 2.0) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            placed, total, loading = self.progress()
            if not loading:
                return
            print(f"wsrv: model {self.name} loading: {100 * placed / max(total, 1):.0f}% "
                  f"({placed / 2**30:.2f} of {total / 2**30:.2f} GiB placed)", file=sys.stderr, flush=True)
            step = every if end is None else max(0.0, min(every, end - time.monotonic()))
            try:
                self.wait(timeout=step)
                return
            except WsrvError as e:
                if e.errno != errno.ETIMEDOUT or (end is not None and time.monotonic() >= end):
                    raise

    def progress(self) -> tuple[int, int, bool]:
        """(placed, total, loading): tensor bytes in place and in all, and
        whether the model is still loading here."""
        placed, total = ctypes.c_uint64(), ctypes.c_uint64()
        r = lib.wsrv_model_progress(self._ptr(), ctypes.byref(placed), ctypes.byref(total))
        check(min(r, 0))
        return placed.value, total.value, bool(r)

    def layers(self) -> list[Layer]:
        """The layer groups in order: the global group (-1) first. Their
        names and sizes only: on a model still loading this does not wait."""
        out: list[Layer] = []
        for i in range(lib.wsrv_model_layer_count(self._ptr())):
            li = new(LayerInfo)
            check(lib.wsrv_model_layer_info(self._ptr(), i, ctypes.byref(li)))
            out.append(Layer(li, self._names[li.first:li.first + li.count]))
        return out

    @property
    def config(self) -> dict[str, Any]:
        """The model's config.json, parsed ({} when it had none)."""
        if self._config is None:
            n = ctypes.c_size_t()
            p = lib.wsrv_model_config(self._ptr(), ctypes.byref(n))
            cfg: dict[str, Any] = json.loads(ctypes.string_at(p, n.value)) if p else {}
            self._config = cfg
        return self._config

    def _generations(self) -> tuple[int, int]:
        mapped, latest = ctypes.c_uint64(), ctypes.c_uint64()
        check(lib.wsrv_model_generation(self._ptr(), ctypes.byref(mapped), ctypes.byref(latest)))
        return mapped.value, latest.value

    @property
    def generation(self) -> int:
        """The generation of the weights this Model maps."""
        return self._generations()[0]

    @property
    def latest_generation(self) -> int:
        """The newest generation the server announced (Client.poll_events
        takes announcements in); a worker switches between passes by
        closing this Model and attaching again."""
        return self._generations()[1]

    def held(self) -> Optional[dict[str, int]]:
        """None when the server holds the whole model; for a partial load
        (wsrvd --ranks A-B --world W) a dict: first, last, world, stages,
        bytes. A rank it does not hold cannot open a stream (WsrvError,
        naming the ranks held)."""
        h = new(HeldInfo)
        check(lib.wsrv_model_held(self._ptr(), ctypes.byref(h)))
        if h.world == 0:
            return None
        return {"first": h.first, "last": h.last, "world": h.world, "stages": h.stages,
                "bytes": h.bytes}

    def fp8_block(self) -> tuple[int, int]:
        """The FP8 scale block [rows, cols] the config states ([128, 128])."""
        b = (ctypes.c_uint64 * 2)()
        check(lib.wsrv_model_fp8_block(self._ptr(), b))
        return (b[0], b[1])

    def state_dict(self, plan: Union[Plan, PlanSpec, None] = None, rank: int = 0,
                   world: int = 1, layers: Optional[list[int]] = None) -> StateDict:
        """A rank's tensors under the plan's tp_plan as torch tensors: views
        of the shared mapping where its part is contiguous or strided, a
        copy only where a layout needs one (named in .copied). Another
        rank's experts are absent.

        layers: only these layers' tensors (-1: the global group), each
        mapped first (model.wait(layer)) and held until close. A model
        larger than its server's --memory-budget has layers on the
        server's disk tier; without layers, its state_dict fails at once
        with EAGAIN naming these calls, as it cannot all be held at once:
        take it a few layers at a time, or stream it."""
        p = Plan.of(plan)
        rank, world = rank_world(rank, world)
        want = None if layers is None else set(layers)
        for lay in sorted(want or ()):
            self.wait(lay)
        s = open_raw(self._ptr(), None, p, new(StreamOpts, slots=1, rank=rank, world=world))
        try:
            return self._views(s, rank, want)
        finally:
            lib.wsrv_stream_close(s)

    def _views(self, s: ctypes.c_void_p, rank: int, want: Optional[set[int]] = None) -> StateDict:
        """Every view in bulk (_bulk.py), and the few it leaves one by
        one, in the model's order."""
        rows = _bulk.rows_of(s, len(self._names))
        if self._kinds is None:
            self._kinds = _bulk.kinds(self._names)
        made, rest = _bulk.views(self._handle(), rows, want, self._names, self._kinds,
                                 lambda i: self._not_here(self._tensor_at(i).layer))
        out = StateDict()
        if not rest:
            out.update(made)
            return out
        one = self._views_one(s, rest, want)
        for nm in self._names:
            if nm in made:
                out[nm] = made[nm]
            elif nm in one:
                out[nm] = one[nm]
        out.copied = one.copied
        return out

    def _not_here(self, layer: int) -> WsrvError:
        return WsrvError(errno.EAGAIN, f"model {self.name} has layers on the server's disk tier "
                         f"(wsrvd --memory-budget), not mapped here (layer {layer} first): "
                         "state_dict(layers=[...]) maps and returns the layers named (held until "
                         "close), or model.stream(...) takes them a layer at a time")

    def _views_one(self, s: ctypes.c_void_p, which: list[int], want: Optional[set[int]] = None) -> StateDict:
        """Tensors which, each a view (or a copy) of its own."""
        out = StateDict()
        for i in which:
            nm = self._names[i]
            v, lay = new(View), new(Layout)
            check(lib.wsrv_stream_view(s, i, ctypes.byref(v)))
            if not v.present:
                continue
            t = self._tensor_at(i)
            if want is not None and t.layer not in want:
                continue
            check(lib.wsrv_stream_layout(s, i, ctypes.byref(lay)))
            shape = tuple(v.shape[k] for k in range(v.rank))
            try:
                part, copied = _part(t, lay, shape, v.bytes)
            except WsrvError as e:
                if e.errno != errno.EAGAIN or want is not None:
                    raise
                raise self._not_here(t.layer) from None
            out[nm] = part
            if copied:
                out.copied.add(nm)
        return out

    def publish(self, base: Optional[str] = None) -> Publish:
        """A new generation of this model from this process's bytes (a
        trainer's): see wsrv.Publish. The server must allow this user
        (--allow-publish-uid/gid). base="current": it starts from the
        current generation's bytes, and only what is written differs (a
        trainer that changed some tensors writes those)."""
        return Publish(self, base)

    def stream(self, device: str = "host", plan: Union[Plan, PlanSpec, None] = None, slots: int = 2,
               rank: int = 0, world: int = 1, **kw: Any) -> Stream:
        """A layer stream on a device (see wsrv.Stream)."""
        return Stream(self, device=device, plan=plan, slots=slots, rank=rank, world=world, **kw)

    def close(self) -> None:
        """Detaches once the last view of the model is gone."""
        self._h = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<wsrv.Model {self.name}: {len(self)} tensors>"


def _part(tensor: Tensor, lay: ctypes.Structure, shape: tuple[int, ...],
          nbytes: int) -> tuple[torch.Tensor, bool]:
    """The rank's part of tensor by its layout: (torch tensor, copied?)."""
    full = tensor.torch().reshape(-1)
    es = full.element_size()
    if any(x % es for x in (lay.offset, lay.row_bytes, lay.row_pitch)):
        raise WsrvError(22, f"{tensor.name}: its layout is not in whole elements")
    off, n = lay.offset // es, lay.row_bytes // es
    if lay.rows == 1:
        part = full[off:off + n]
        return (part.view(shape) if _dtypes.itemsize(tensor._code) else part), False
    strided = full.as_strided((lay.rows, n), (lay.row_pitch // es, 1), full.storage_offset() + off)
    if shape == (lay.rows, n):
        return strided, False
    try:
        return strided.view(shape), False
    except RuntimeError:
        return strided.reshape(shape).clone(), True
