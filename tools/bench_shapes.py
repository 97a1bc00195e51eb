# SPDX-License-Identifier: MIT
"""The seeds' real shapes, as tests/test_real_shape.c makes and caches them,
for the benchmarks that run at them (tools/bench-all, tools/bench-peers)."""

import os
import shutil
import subprocess

REAL_SHAPES = {
    "kimi": ("kimi-k2-shape-1", ["--preset", "deepseek-v3-mini", "--size", "2G", "--layers", "61", "--experts",
                                 "384", "--topk", "8", "--shards", "64", "--seed", "7"], None),
    "dsv3": ("deepseek-v3-shape-1", ["--preset", "deepseek-v3-shape", "--layers", "61", "--experts", "256",
                                     "--topk", "8", "--shards", "163", "--seed", "7"],
             {"tp_plan": {"layers.*.mlp.experts.*.gate_proj": "local_colwise",
                          "layers.*.mlp.experts.*.up_proj": "local_colwise",
                          "layers.*.mlp.experts.*.down_proj": "local_rowwise",
                          "layers.*.mlp.shared_experts.gate_proj": "local_colwise",
                          "layers.*.mlp.shared_experts.up_proj": "local_colwise",
                          "layers.*.mlp.shared_experts.down_proj": "local_rowwise",
                          "layers.*.mlp.gate_proj": "local_colwise", "layers.*.mlp.up_proj": "local_colwise",
                          "layers.*.mlp.down_proj": "local_rowwise"}}),
}


def real_shape_dir(build, shape):
    """The shape's model in the tests' cache ($WSRV_REAL_SHAPE_DIR, else
    /var/tmp/wsrv-real-shape), made there when missing (whole, or not at all)."""
    root = os.environ.get("WSRV_REAL_SHAPE_DIR", "/var/tmp/wsrv-real-shape")
    name, args, _ = REAL_SHAPES[shape]
    d = os.path.join(root, name)
    if not os.path.exists(os.path.join(d, ".whole")):
        os.makedirs(root, exist_ok=True)
        tmp = d + ".making"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run([os.path.join(build, "tools", "wsrv-mkmodel")] + args + ["--out", tmp], check=True,
                       stdout=subprocess.DEVNULL)
        os.rename(tmp, d)
        open(os.path.join(d, ".whole"), "w").close()
    return d
