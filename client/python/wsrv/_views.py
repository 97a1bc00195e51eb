# SPDX-License-Identifier: MIT
"""Views of mapped bytes, as numpy arrays and torch tensors, without a
copy: what model.py, stream.py and publish.py hand out (as safetensors
has its numpy.py and torch.py)."""

from __future__ import annotations

import ctypes
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import _dtypes

if TYPE_CHECKING:
    import torch


def bytes_view(owner: object, addr: int, nbytes: int) -> memoryview:
    """A read-only memoryview of nbytes at addr that keeps owner alive."""
    arr = (ctypes.c_char * nbytes).from_address(addr)
    setattr(arr, "_wsrv_owner", owner)
    return memoryview(arr).cast("B").toreadonly()


def torch_of(array: npt.NDArray[Any], code: int) -> torch.Tensor:
    """torch.from_numpy without a copy (the array is read-only: torch's
    warning about that is expected and silenced), viewed as code's dtype."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        t = torch.from_numpy(array)
    want = _dtypes.torch_dtype(code)
    return t.view(want) if want is not None and t.dtype != want else t


def array_of(mv: memoryview, code: int, shape: tuple[int, ...], nbytes: int,
             for_torch: bool) -> npt.NDArray[Any]:
    """mv's bytes as an ndarray: the element dtype (or, for torch, the
    carrier of its size) in shape; a uint8 view where there is none."""
    np_dt = _dtypes.numpy_dtype(code)
    if for_torch and _dtypes.torch_dtype(code) is not None:
        np_dt = _dtypes.carrier(code)
    if np_dt is None or (for_torch and _dtypes.torch_dtype(code) is None):
        a = np.frombuffer(mv, dtype=np.uint8, count=nbytes)
        return a.reshape(shape) if _dtypes.itemsize(code) == 1 else a
    return np.frombuffer(mv, dtype=np_dt, count=nbytes // np.dtype(np_dt).itemsize).reshape(shape)
