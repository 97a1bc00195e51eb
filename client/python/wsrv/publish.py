# SPDX-License-Identifier: MIT
"""Publishing a new generation from a trainer's own tensors."""

import ctypes

import numpy as np

from . import _dtypes
from ._lib import check, lib
from .model import torch_of


class Publish:
    """A new generation of a model, laid out as the current one. `p[name]`
    is a writable torch tensor over the new generation's memory (copy into
    it: `p[name].copy_(t)`); `commit()` seals, checksums and publishes it,
    and returns its generation once it serves; `abort()` drops it. As a
    context manager it commits, or aborts on an exception. The tensors it
    hands out are unmapped by commit and abort: keep none past them."""

    def __init__(self, model):
        self.model = model
        self._p = ctypes.c_void_p()
        check(lib.wsrv_publish_begin(model._client_ptr, model.name.encode(), ctypes.byref(self._p)),
              f"publish {model.name}")

    def __getitem__(self, name):
        if not self._p:
            raise ValueError("the publish is committed or aborted")
        t = self.model[name]
        data, size = ctypes.c_void_p(), ctypes.c_uint64()
        check(lib.wsrv_publish_tensor(self._p, name.encode(), ctypes.byref(data), ctypes.byref(size)), name)
        arr = (ctypes.c_char * size.value).from_address(data.value)
        arr._wsrv_owner = self
        carrier = _dtypes.carrier(t._code) if _dtypes.torch_dtype(t._code) is not None else np.uint8
        a = np.frombuffer(memoryview(arr).cast("B"), dtype=carrier)
        shape = t.shape if _dtypes.itemsize(t._code) else (size.value,)
        return torch_of(a.reshape(shape), t._code)

    def commit(self):
        """Publishes; the new generation's number once it serves."""
        gen = ctypes.c_uint64()
        p, self._p = self._p, None
        check(lib.wsrv_publish_commit(p, ctypes.byref(gen)), f"publish {self.model.name}")
        return gen.value

    def abort(self):
        if self._p:
            lib.wsrv_publish_abort(self._p)
            self._p = None

    def __enter__(self):
        return self

    def __exit__(self, exc, *rest):
        if exc is None and self._p:
            self.generation = self.commit()
        else:
            self.abort()

    def __del__(self):
        self.abort()

