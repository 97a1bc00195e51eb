# SPDX-License-Identifier: MIT
"""A small safetensors reader independent of wsrv, for checking it: the
8-byte header length, the JSON header, numpy.memmap over each tensor's
offsets. Returns torch tensors (FP8 and other types torch lacks as uint8,
as wsrv does)."""

import glob
import json
import os
import struct
import warnings

import numpy as np
import torch

NP = {"BF16": (np.int16, torch.bfloat16), "F16": (np.float16, None), "F32": (np.float32, None),
      "F64": (np.float64, None), "I64": (np.int64, None), "I32": (np.int32, None),
      "I16": (np.int16, None), "I8": (np.int8, None), "U8": (np.uint8, None),
      "BOOL": (np.bool_, None)}


def read_file(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        dt, view = NP.get(t["dtype"], (np.uint8, None))
        a = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n + lo, shape=(hi - lo,))
        a = a.view(dt).reshape(t["shape"]) if hi > lo else np.zeros(t["shape"], dt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = torch.from_numpy(a)
        out[name] = x.view(view) if view is not None else x
    return out


def read_model(d):
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        out.update(read_file(p))
    return out
