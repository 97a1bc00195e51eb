# SPDX-License-Identifier: MIT
"""safetensors dtypes (wsrv.h's enum wsrv_dtype) and how each comes back in
numpy and torch.

A dtype the framework lacks comes back as a uint8 view of the bytes, with
the real dtype in Tensor.dtype: the FP8 types and the sub-byte F4 / F6 in
both (Debian's torch 1.13 has no float8), BF16 in numpy (as uint16 bits:
.torch() gives torch.bfloat16), and U16 / U32 / U64 in torch (1.13 has no
unsigned types wider than 8 bits)."""

from __future__ import annotations

from typing import Optional

import numpy as np

try:
    import torch
except ImportError:  # numpy alone is enough for .numpy()
    torch = None  # type: ignore[assignment]

#: A numpy scalar type (np.float16, np.uint8, ...).
NpType = type[np.generic]

# Index = enum wsrv_dtype. (name, bytes per element or 0 for sub-byte,
# numpy dtype or None, torch dtype name or None)
_TABLE: list[tuple[str, int, Optional[NpType], Optional[str]]] = [
    ("BOOL", 1, np.bool_, "bool"),
    ("F4", 0, None, None),
    ("F6_E2M3", 0, None, None),
    ("F6_E3M2", 0, None, None),
    ("U8", 1, np.uint8, "uint8"),
    ("I8", 1, np.int8, "int8"),
    ("F8_E5M2", 1, None, None),
    ("F8_E4M3", 1, None, None),
    ("F8_E8M0", 1, None, None),
    ("F8_E4M3FNUZ", 1, None, None),
    ("F8_E5M2FNUZ", 1, None, None),
    ("I16", 2, np.int16, "int16"),
    ("U16", 2, np.uint16, None),
    ("F16", 2, np.float16, "float16"),
    ("BF16", 2, np.uint16, "bfloat16"),
    ("I32", 4, np.int32, "int32"),
    ("U32", 4, np.uint32, None),
    ("F32", 4, np.float32, "float32"),
    ("I64", 8, np.int64, "int64"),
    ("U64", 8, np.uint64, None),
    ("F64", 8, np.float64, "float64"),
    ("C64", 8, np.complex64, "complex64"),
]

# A numpy dtype of each size, to carry a torch view of the same bytes.
_CARRIER: dict[int, NpType] = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def name(code: int) -> str:
    """The safetensors name of dtype code ("?" for one this table lacks)."""
    return _TABLE[code][0] if 0 <= code < len(_TABLE) else "?"


def itemsize(code: int) -> int:
    """Bytes per element; 0 for the sub-byte types."""
    return _TABLE[code][1]


def numpy_dtype(code: int) -> Optional[NpType]:
    """The numpy dtype of a view, or None: a uint8 view of the bytes."""
    return _TABLE[code][2]


def torch_dtype(code: int) -> Optional[torch.dtype]:
    """The torch dtype of a view, or None: a uint8 view of the bytes."""
    t = _TABLE[code][3]
    if torch is None or not t:
        return None
    dt: torch.dtype = getattr(torch, t)
    return dt


def carrier(code: int) -> NpType:
    """The numpy dtype whose array torch.from_numpy can take and .view()
    as torch_dtype(code) without a copy."""
    return _CARRIER[_TABLE[code][1]]
