# SPDX-License-Identifier: MIT
"""A state_dict's views built in bulk, for models of 100,000 tensors and
more: one call into libwsrv gives every tensor's placement
(wsrv_stream_views), one torch tensor is made per segment and dtype over
the segment's mapping, and tensors laid out alike (one projection of a
layer's experts) come from one as_strided view split by unbind. Three
ctypes calls and a numpy array per tensor, as a single tensor's view
takes, cost more than the views themselves at that count, and a torch
tensor made from Python costs twice what unbind's cost. A tensor this
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
    sel = np.flatnonzero(take & (rows["data"] != 0))   # fields, not records: a record is 240 bytes
    seg, off = rows["segment"][sel], rows["offset"][sel]
    segs, first = np.unique(seg, return_index=True)
    end = np.zeros(len(segs), dtype=np.uint64)
    np.maximum.at(end, np.searchsorted(segs, seg), off + rows["size"][sel])
    base = (rows["data"][sel[first]] - off[first]).tolist()
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


def _runs(cols: list[Any], start: Any) -> tuple[Any, Any, Any]:
    """Tensors in runs one strided view covers: sorted by their key columns
    and then by start, a run is tensors of equal keys whose starts step by
    one delta (a layer's experts, laid out alike). Returns the order, each
    run's first position in it, and each run's length and step."""
    order = np.lexsort([start] + cols[::-1])
    s = start[order].astype(np.int64)
    n = len(s)
    same = np.zeros(n, dtype=bool)
    same[1:] = True
    for c in cols:
        cs = c[order]
        same[1:] &= cs[1:] == cs[:-1]
    step = np.zeros(n, dtype=np.int64)
    step[1:] = s[1:] - s[:-1]
    brk = ~same
    brk[2:] |= same[1:-1] & (step[2:] != step[1:-1])
    first = np.flatnonzero(brk)
    length = np.diff(np.append(first, n))
    step_of = np.where(length > 1, step[np.minimum(first + 1, n - 1)], 0)
    return order, first, np.stack([length, step_of], axis=1)


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    acc, lst = 1, []
    for d in reversed(shape):
        lst.append(acc)
        acc *= d
    return tuple(reversed(lst))


def kinds(names: list[str]) -> Any:
    """A number per name for what follows its last two dots
    ("gate_proj.weight"): a layer's experts share it, so a run holds one
    projection's tensors, not two interleaved."""
    tails = [n[n.rfind(".", 0, n.rfind(".")):] for n in names]
    ids = {t: i for i, t in enumerate(dict.fromkeys(tails))}
    return np.fromiter(map(ids.__getitem__, tails), dtype=np.int64, count=len(tails))


def _made(bases: dict[tuple[int, int], Any], r: Any, esr: Any, kind: Any) -> list[Any]:
    """The views of rows r (all of the fast path), in r's order: one
    as_strided per run (_runs), split by unbind, as making torch tensors
    one by one costs twice what unbind does."""
    esz = np.maximum(esr, 1).astype(np.uint64)
    start = ((r["offset"] + r["part_offset"]) // esz).astype(np.int64)
    pitch = np.where(r["rows"] > 1, r["row_pitch"] // esz, 0).astype(np.int64)
    width = int(r["rank"].max()) if len(r) else 0
    cols = [kind, r["segment"], r["dtype"], r["rank"], pitch] + [r["shape"][:, k] for k in range(width)]
    order, first, runs = _runs(cols, start)
    heads = order[first]
    out: list[Any] = []
    strides: dict[tuple[int, ...], tuple[int, ...]] = {}
    for (n, step), g, c, k, p, sh, s0 in zip(
            runs.tolist(), r["segment"][heads].tolist(), r["dtype"][heads].tolist(), r["rank"][heads].tolist(),
            pitch[heads].tolist(), r["shape"][heads, :width].tolist(), start[heads].tolist()):
        shape = tuple(sh[:k])
        st = (p, 1) if p else strides.get(shape) or strides.setdefault(shape, _strides(shape))
        if n == 1:
            out.append(bases[g, c].as_strided(shape, st, s0))
        else:
            out.extend(bases[g, c].as_strided((n,) + shape, (step,) + st, s0).unbind(0))
    back = np.empty(len(order), dtype=np.int64)
    back[order] = np.arange(len(order))
    return list(map(out.__getitem__, back.tolist()))


def views(owner: object, rows: Any, want: Optional[set[int]], names: list[str], kind: Any,
          missing: Callable[[int], Exception]) -> tuple[dict[str, Any], list[int]]:
    """The views of rows (rows_of) that this path makes, by name, and the
    indices it leaves to the per-tensor path. want: only these layers.
    kind: kinds(names), which a caller keeps for the next call. missing(i)
    is raised for a tensor wanted but not mapped here."""
    take = rows["present"] != 0
    if want is not None:
        take &= np.isin(rows["layer"], list(want))
    lost = np.flatnonzero(take & (rows["data"] == 0))
    if len(lost):
        raise missing(int(lost[0]))
    carrier = _carriers()
    es = np.zeros(len(rows), dtype=np.int64)
    for c in np.unique(rows["dtype"]).tolist():
        k = carrier(c)
        es[rows["dtype"] == c] = k[1] if k else 0
    fast = _fast(rows, take, es)
    rest = np.flatnonzero(take & ~fast).tolist()
    idx = np.flatnonzero(fast)
    r = rows if len(idx) == len(rows) else rows[idx]
    spans = _spans(rows, take)
    raw = {g: _base(owner, *spans[g]) for g in np.unique(r["segment"]).tolist()}
    bases = {}
    for g, c in set(zip(r["segment"].tolist(), r["dtype"].tolist())):
        dt = carrier(c)[0]  # type: ignore[index]
        bases[g, c] = raw[g] if raw[g].dtype == dt else raw[g].view(dt)
    if len(idx) == len(rows):
        named = names
    else:
        named, kind = [names[i] for i in idx.tolist()], kind[idx]
    return dict(zip(named, _made(bases, r, es[idx], kind))), rest
