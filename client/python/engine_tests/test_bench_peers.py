# SPDX-License-Identifier: MIT
"""tools/bench-peers, the table against the loaders users pick instead, on a
small model: every loader that runs on a CPU (safetensors, fastsafetensors,
Run:ai Model Streamer, tensorizer) hands a worker the same bytes as wsrv
(--verify compares every tensor's name, dtype, shape and bytes), every row
has its figures, InstantTensor's row says why it did not run here, and the
JSON holds what docs/benchmarks.md says it does."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_vllm import mkmodel, need  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CPU_LOADERS = ("safetensors", "fastsafetensors", "runai", "tensorizer", "wsrv")
FIGURES = ("version", "one_s", "load_s", "four_s", "pss_x", "cpu_s_per_gb")


def test_every_loader_the_same_bytes(tmp_path):
    model = mkmodel(tmp_path / "m", "llama-mini", "24M", 2, 11)
    build = os.path.dirname(os.path.dirname(os.path.dirname(need("WSRVD"))))
    out = tmp_path / "peers.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench-peers"), "--build", build,
                        "--python", sys.executable, "--shapes", "", "--model", "small=" + model,
                        "--workdir", str(tmp_path / "work"), "--workers", "2", "--no-cold", "--verify",
                        "--json", str(out)], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    j = json.load(open(out))
    rows = j["shape"]["small"]
    for k in CPU_LOADERS:
        assert "error" not in rows[k], (k, rows[k])
        for f in FIGURES:
            assert rows[k].get(f) is not None, (k, f, rows[k])
        assert rows[k]["tensors"] == rows["wsrv"]["tensors"]
        assert rows[k]["digest"] == rows["wsrv"]["digest"], k
    assert "later_s" in rows["wsrv"] and "first_warm_s" in rows["wsrv"]
    assert "CUDA" in rows["instanttensor"]["error"]
    assert j["fresh_gbps"] > 0 and j["state"].startswith("page cache warm")
    # wsrv's workers share one copy: 2 of them and wsrvd hold well under 2 copies.
    assert rows["wsrv"]["pss_x"] < 2.0, rows["wsrv"]
    assert "small:" in r.stdout and "bar:" in r.stdout
