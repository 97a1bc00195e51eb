# SPDX-License-Identifier: MIT
"""A state_dict's views built in bulk, for models of 100,000 tensors and
more: one call into libwsrv gives every tensor's placement
(wsrv_stream_views), one torch tensor is made per segment and dtype over
the segment's mapping, and each tensor is an as_strided view of it. Three
ctypes calls and a numpy array per tensor, as a single tensor's view
takes, cost more than the views themselves at that count. A tensor this
path cannot view (a dtype torch lacks, a layout that needs a copy) is
left to the caller's per-tensor path."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from . import _dtypes
from ._lib import ViewRow, check, lib

if TYPE_CHECKING:
    import torch

_PAGE = 4096

#: ViewRow as a numpy record, field for field (test_structs holds ViewRow to wsrv.h).
_ROW = np.dtype([(name, _np_type) for name, _np_type in [
    ("data", "u8"), ("offset", "u8"), ("size", "u8"), ("bytes", "u8"), ("part_offset", "u8"),
    ("row_bytes", "u8"), ("rows", "u8"), ("row_pitch", "u8"), ("shape", ("u8", 16)), ("dtype", "i4"),
    ("layer", "i4"), ("rank", "u4"), ("segment", "u4"), ("present", "i4"), ("reserved", ("u4", 3))]])


def rows_of(s: ctypes.c_void_p, n: int) -> Any:
    """Every tensor's ViewRow, as a numpy record array."""
    rows = (ViewRow * n)()
    check(lib.wsrv_stream_views(s, 0, n, rows, ctypes.sizeof(ViewRow)))
    assert _ROW.itemsize == ctypes.sizeof(ViewRow)
    return np.frombuffer(memoryview(rows).cast("B"), dtype=_ROW, count=n)


def _base(owner: object, addr: int, length: int) -> torch.Tensor:
    """A uint8 torch tensor over length bytes at addr, keeping owner alive."""
    import torch

    buf = (ctypes.c_char * length).from_address(addr)
    setattr(buf, "_wsrv_owner", owner)
    return torch.frombuffer(buf, dtype=torch.uint8)


def _spans(rows: Any, take: Any) -> dict[int, tuple[int, int]]:
    """Each segment's mapping: (its first byte's address, bytes up to the
    page past its last tensor), from the tensors mapped here."""
    r = rows[take & (rows["data"] != 0)]
    segs, first = np.unique(r["segment"], return_index=True)
    end = np.zeros(len(segs), dtype=np.uint64)
    np.maximum.at(end, np.searchsorted(segs, r["segment"]), r["offset"] + r["size"])
    base = (r["data"][first] - r["offset"][first]).tolist()
    return {g: (b, (e + _PAGE - 1) // _PAGE * _PAGE) for g, b, e in zip(segs.tolist(), base, end.tolist())}


def _carriers() -> Callable[[int], Optional[tuple[Any, int]]]:
    """code -> (the torch dtype a view has, its element size), or None
    where this path does not view it (a dtype torch lacks, wider than a
    byte, or sub-byte)."""
    import torch

    cache: dict[int, Optional[tuple[Any, int]]] = {}

    def of(code: int) -> Optional[tuple[Any, int]]:
        if code not in cache:
            es, dt = _dtypes.itemsize(code), _dtypes.torch_dtype(code)
            cache[code] = (dt, es) if dt is not None and es else (torch.uint8, 1) if es == 1 else None
        return cache[code]
    return of


def _fast(rows: Any, take: Any, es: Any) -> Any:
    """Which tensors a strided view of their segment gives as they are:
    whole elements everywhere, and one row of exactly the shape's bytes,
    or rows whose shape is (rows, row elements)."""
    esz = np.maximum(es, 1).astype(np.uint64)
    whole = ((rows["offset"] + rows["part_offset"]) % esz == 0) & (rows["row_bytes"] % esz == 0) & \
        (rows["row_pitch"] % esz == 0) & (es > 0)
    rank = rows["rank"].astype(np.int64)
    dims = np.where(np.arange(16)[None, :] < rank[:, None], rows["shape"], 1)
    one = (rows["rows"] == 1) & (np.prod(dims, axis=1, dtype=np.uint64) * esz == rows["bytes"])
    two = (rows["rows"] > 1) & (rank == 2) & (rows["shape"][:, 0] == rows["rows"]) & \
        (rows["shape"][:, 1] * esz == rows["row_bytes"])
    return take & whole & (one | two)


def views(owner: object, rows: Any, want: Optional[set[int]], names: list[str],
          missing: Callable[[int], Exception]) -> tuple[dict[str, Any], list[int]]:
    """The views of rows (rows_of) that this path makes, by name, and the
    indices it leaves to the per-tensor path. want: only these layers.
    missing(i) is raised for a tensor wanted but not mapped here."""
    take = rows["present"] != 0
    if want is not None:
        take &= np.isin(rows["layer"], list(want))
    lost = np.flatnonzero(take & (rows["data"] == 0))
    if len(lost):
        raise missing(int(lost[0]))
    carrier = _carriers()
    codes = np.unique(rows["dtype"]).tolist()
    es = np.zeros(len(rows), dtype=np.int64)
    for c in codes:
        k = carrier(c)
        es[rows["dtype"] == c] = k[1] if k else 0
    fast = _fast(rows, take, es)
    rest = np.flatnonzero(take & ~fast).tolist()
    idx = np.flatnonzero(fast)
    r = rows[idx]
    width = int(r["rank"].max()) if len(r) else 0
    shapes = [tuple(x[:k]) for x, k in zip(r["shape"][:, :width].tolist(), r["rank"].tolist())]
    esr = es[idx]
    start = ((r["offset"] + r["part_offset"]) // np.maximum(esr, 1).astype(np.uint64)).tolist()
    pitch = (r["row_pitch"] // np.maximum(esr, 1).astype(np.uint64)).tolist()
    multi = (r["rows"] > 1).tolist()
    seg, code = r["segment"].tolist(), r["dtype"].tolist()
    spans = _spans(rows, take)
    raw: dict[int, Any] = {}
    typed: dict[tuple[int, int], Any] = {}

    def base_of(key: tuple[int, int]) -> Any:
        g, c = key
        if g not in raw:
            raw[g] = _base(owner, *spans[g])
        dt = carrier(c)[0]  # type: ignore[index]
        typed[key] = raw[g] if raw[g].dtype == dt else raw[g].view(dt)
        return typed[key]

    strides: dict[tuple[int, ...], tuple[int, ...]] = {}

    def contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
        acc, lst = 1, []
        for d in reversed(shape):
            lst.append(acc)
            acc *= d
        strides[shape] = tuple(reversed(lst))
        return strides[shape]

    keys = list(zip(seg, code))
    for k in set(keys):
        base_of(k)
    bases = list(map(typed.__getitem__, keys))
    sts = [(p, 1) if m else strides.get(sh) or contiguous(sh) for p, m, sh in zip(pitch, multi, shapes)]
    import torch

    made = map(torch.Tensor.as_strided, bases, shapes, sts, start)
    out = dict(zip([names[i] for i in idx.tolist()], made))
    return out, rest
