# SPDX-License-Identifier: MIT
"""Publishing a new generation from a trainer's own tensors."""

from __future__ import annotations

import ctypes
import errno
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import numpy as np
import numpy.typing as npt

from . import _dtypes
from ._attached import AttachedModel
from ._lib import check, cstr, lib
from ._views import torch_of

if TYPE_CHECKING:
    import torch


_libc = ctypes.CDLL(None, use_errno=True)
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int


class _Ranges:
    """The publish's writable ranges. After commit or abort the library
    leaves them mapped inaccessible (wsrv_publish_keep_reserved), so that
    no later mapping lands under a tensor kept past them; they are unmapped
    here once no tensor refers to them."""

    def __init__(self, p: ctypes.c_void_p) -> None:
        self.closed = False
        self.ranges: list[tuple[int, int]] = []
        addr, size = ctypes.c_void_p(), ctypes.c_uint64()
        i = 0
        while lib.wsrv_publish_segment(p, i, ctypes.byref(addr), ctypes.byref(size)) == 0:
            self.ranges.append((addr.value or 0, size.value))
            i += 1

    def __del__(self) -> None:
        if self.closed:
            for addr, size in self.ranges:
                _libc.munmap(addr, size)
            self.ranges = []


_PUBLISH_TENSOR: Optional[type[torch.Tensor]] = None


def publish_tensor_class() -> type[torch.Tensor]:
    """PublishTensor: a tensor over a publish's writable memory. Once the
    publish is committed or aborted, any use of it (or of a view of it)
    raises ValueError: its memory is no longer this process's to touch.
    Made on first use, so that importing wsrv does not import torch."""
    global _PUBLISH_TENSOR
    if _PUBLISH_TENSOR is None:
        import torch

        class PublishTensor(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func: Callable[..., Any], types: Iterable[type],
                                   args: tuple[Any, ...] = (),
                                   kwargs: Optional[dict[str, Any]] = None) -> Any:
                kwargs = kwargs or {}
                ranges = _ranges_of(args, kwargs)
                if ranges is not None and ranges.closed:
                    raise ValueError("this tensor belongs to a publish that is committed or aborted: "
                                     "its memory is gone; copy what you need before commit()")
                base: Callable[..., Any] = super().__torch_function__
                out = base(func, types, args, kwargs)
                if ranges is not None:
                    _tag(out, ranges)
                return out

        _PUBLISH_TENSOR = PublishTensor
    return _PUBLISH_TENSOR


def _ranges_of(args: Iterable[Any], kwargs: dict[str, Any]) -> Optional[_Ranges]:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            r = _ranges_of(a, {})
            if r is not None:
                return r
        r = getattr(a, "_wsrv_ranges", None) if isinstance(a, publish_tensor_class()) else None
        if isinstance(r, _Ranges):
            return r
    return None


def _tag(out: Any, ranges: _Ranges) -> None:
    """Views made from a publish's tensor carry its ranges (and so its
    check, and a reference that keeps the ranges reserved)."""
    if isinstance(out, publish_tensor_class()) and getattr(out, "_wsrv_ranges", None) is None:
        setattr(out, "_wsrv_ranges", ranges)
    elif isinstance(out, (list, tuple)):
        for o in out:
            _tag(o, ranges)


def _bytes_of(data: Any, code: int, name: str) -> tuple[Any, int, int]:
    """(what keeps them alive, their address, their length) of data's
    bytes, contiguous in host memory."""
    import torch
    if isinstance(data, torch.Tensor):
        want = _dtypes.torch_dtype(code)
        if want is not None and data.dtype != want:
            raise TypeError(f"{name} is {want}; the tensor written to it is {data.dtype}")
        t = data.detach().to("cpu").contiguous()
        return t, t.data_ptr(), t.numel() * t.element_size()
    a = np.ascontiguousarray(data) if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    return a, a.ctypes.data, a.nbytes


class Publish:
    """A new generation of a model, laid out as the current one. `p[name]`
    is a writable torch tensor over the new generation's memory (copy into
    it: `p[name].copy_(t)`); `commit()` seals, checksums and publishes it,
    and returns its generation once it serves; `abort()` drops it. As a
    context manager it commits, or aborts on an exception. The tensors it
    hands out are unusable after commit and abort (ValueError), and their
    memory is never reused under them. Every tensor must be written whole
    before the commit: one never written is refused by name, so a new
    generation never serves bytes nobody wrote; unless base="current",
    where what is not written keeps the current generation's bytes (a
    segment nothing wrote is shared with it, neither copied nor held
    twice)."""

    def __init__(self, model: AttachedModel, base: Optional[str] = None) -> None:
        if base not in (None, "current"):
            raise ValueError(f"base={base!r}: a publish starts from nothing (None) or from \"current\"")
        self.model = model
        self.generation: Optional[int] = None  # set by the with block's commit
        self._p: Optional[ctypes.c_void_p] = ctypes.c_void_p()
        check(lib.wsrv_publish_begin(model._client_ptr, cstr(model.name), ctypes.byref(self._p)),
              f"publish {model.name}")
        check(lib.wsrv_publish_keep_reserved(self._p), f"publish {model.name}")
        self._ranges = _Ranges(self._p)
        if base == "current":
            rc = lib.wsrv_publish_keep_current(self._p)
            if rc < 0:
                self.abort()
                check(rc, f"publish {model.name} from the current generation")

    def __getitem__(self, name: str) -> torch.Tensor:
        if not self._p:
            raise ValueError("the publish is committed or aborted")
        t = self.model[name]
        data, size = ctypes.c_void_p(), ctypes.c_uint64()
        check(lib.wsrv_publish_tensor(self._p, cstr(name, "a tensor name"), ctypes.byref(data), ctypes.byref(size)), name)
        arr = (ctypes.c_char * size.value).from_address(data.value or 0)
        carrier = _dtypes.carrier(t._code) if _dtypes.torch_dtype(t._code) is not None else np.uint8
        a: npt.NDArray[Any] = np.frombuffer(memoryview(arr).cast("B"), dtype=carrier)
        shape = t.shape if _dtypes.itemsize(t._code) else (size.value,)
        out = torch_of(a.reshape(shape), t._code).as_subclass(publish_tensor_class())
        setattr(out, "_wsrv_ranges", self._ranges)
        return out

    def write(self, name: str, data: Any, offset: int = 0) -> None:
        """Copies data into tensor name's bytes at offset (bytes): a torch
        tensor (any device; its dtype must be the tensor's), a numpy array
        or anything that gives bytes. The library writes it into the
        server's memory by write(2): no page fault and no zeroed page,
        which `p[name].copy_(x)` pays, so a whole model publishes at about
        a memcpy's speed."""
        if not self._p:
            raise ValueError("the publish is committed or aborted")
        keep, ptr, n = _bytes_of(data, self.model[name]._code, name)
        check(lib.wsrv_publish_write(self._p, cstr(name, "a tensor name"), offset, ptr, n), name)
        del keep

    def _close(self) -> Optional[ctypes.c_void_p]:
        p, self._p = self._p, None
        if p:
            self._ranges.closed = True
        return p

    def commit(self) -> int:
        """Publishes; the new generation's number once it serves. Tensors
        never written whole are refused by name (WsrvError, errno
        ENODATA) and the publish stays open: write them and commit again,
        or abort. The server refuses too (EIO) a tensor with a page
        nothing wrote through p[name]; the publish is gone then."""
        gen = ctypes.c_uint64()
        if not self._p:
            raise ValueError("the publish is committed or aborted")
        rc = lib.wsrv_publish_commit(self._p, ctypes.byref(gen))
        if rc != -errno.ENODATA:
            self._close()  # libwsrv freed it
        check(rc, f"publish {self.model.name}")
        return gen.value

    def abort(self) -> None:
        """Drops the new generation; its tensors are unusable from now on."""
        p = self._close()
        if p:
            lib.wsrv_publish_abort(p)

    def __enter__(self) -> Publish:
        return self

    def __exit__(self, exc: Optional[type[BaseException]], *rest: object) -> None:
        if exc is None and self._p:
            try:
                self.generation = self.commit()
            except BaseException:
                self.abort()  # refused: nothing published, nothing left open
                raise
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_p", None):
            self.abort()
