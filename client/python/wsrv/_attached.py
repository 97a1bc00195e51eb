# SPDX-License-Identifier: MIT
"""The parts of an attached model that streams and publishes use too: the
handle that owns the C model, a Tensor and a Layer, and AttachedModel,
what stream.py and publish.py ask of a model (wsrv.Model is one), so that
neither imports model.py, which builds on them."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional, Protocol

from . import _dtypes
from ._lib import lib, text
from ._views import array_of, bytes_view, torch_of
from .errors import WsrvError

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch


class _ModelHandle:
    """Owns a wsrv_model. Every view holds it, so the mapping stays until
    the model is closed and the last view is gone."""

    def __init__(self, ptr: ctypes.c_void_p) -> None:
        self.ptr: Optional[ctypes.c_void_p] = ptr

    def __del__(self) -> None:
        if self.ptr:
            lib.wsrv_detach(self.ptr)
            self.ptr = None


class Tensor:
    """One tensor of an attached model: name, dtype (the safetensors name),
    shape, layer (-1: the global group), nbytes, xxh3 (of the held bytes),
    held: (offset, size) of the bytes the server loaded, (0, nbytes) unless
    it loaded only some ranks (Model.held()); views of its bytes."""

    __slots__ = ("name", "dtype", "shape", "layer", "nbytes", "xxh3", "held", "_code", "_addr",
                 "_owner")

    def __init__(self, info: ctypes.Structure, owner: _ModelHandle) -> None:
        self.name = text(info.name)
        self._code = info.dtype
        self.dtype = _dtypes.name(info.dtype)
        self.shape: tuple[int, ...] = tuple(info.shape[k] for k in range(info.rank))
        self.layer: int = info.layer
        self.nbytes: int = info.size
        self.xxh3: int = info.xxh3
        self.held: tuple[int, int] = (info.held_offset, info.held_size)
        self._addr: int = info.data or 0
        self._owner = owner

    def _mv(self) -> memoryview:
        if not self._addr and self.nbytes:
            # A disk tier's layer (wsrvd --memory-budget) not mapped here:
            # libwsrv gives no address rather than one that faults.
            raise WsrvError(errno.EAGAIN, f"tensor {self.name}: layer {self.layer} is on the server's disk "
                                          "tier and not mapped here; model.wait(layer) maps it (until "
                                          "detach), or stream it")
        return bytes_view(self._owner, self._addr, self.nbytes)

    def numpy(self) -> npt.NDArray[Any]:
        """A read-only ndarray over the shared mapping (uint8 bytes for a
        dtype numpy lacks; BF16 as its uint16 bits)."""
        return array_of(self._mv(), self._code, self.shape, self.nbytes, False)

    def torch(self) -> torch.Tensor:
        """A torch tensor over the shared mapping, no copy. It must not be
        written: the pages are mapped read-only (a write faults)."""
        return torch_of(array_of(self._mv(), self._code, self.shape, self.nbytes, True), self._code)

    def __repr__(self) -> str:
        return f"<wsrv.Tensor {self.name} {self.dtype}{list(self.shape)} layer {self.layer}>"


class Layer:
    """A layer group: its index (-1: global), tensor names, bytes."""

    def __init__(self, info: ctypes.Structure, names: list[str]) -> None:
        self.index: int = info.index
        self.names = names
        self.nbytes: int = info.bytes

    def __repr__(self) -> str:
        return f"<wsrv.Layer {self.index}: {len(self.names)} tensors, {self.nbytes} bytes>"


class AttachedModel(Protocol):
    """What a Stream and a Publish use of a model (wsrv.Model)."""

    name: str
    _client_ptr: ctypes.c_void_p

    def _handle(self) -> _ModelHandle: ...

    def _ptr(self) -> ctypes.c_void_p: ...

    def _tensor_at(self, i: int) -> Tensor: ...

    def layers(self) -> list[Layer]: ...

    def __iter__(self) -> Iterator[str]: ...

    def __getitem__(self, name: str) -> Tensor: ...
