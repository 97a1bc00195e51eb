# SPDX-License-Identifier: MIT
"""One worker of tools/bench-peers: a fresh process that takes a model's
complete state_dict through one loader, says what it cost on one JSON
line, and holds the tensors until its standard input closes (so that the
parent can read what the process holds).

    python bench_peers_worker.py LOADER DEVICE MODEL_DIR [--socket S]
                                 [--tensorizer-file F] [--verify]

LOADER is one of LOADERS' keys; DEVICE is cpu or cuda. The line: t_imported,
t_sd (the state_dict built) and t_done (every page of it read once: see
touch) in time.monotonic(), which a parent on the same host compares with
its own; cpu_s (this process's user and system seconds from the
imports to the state_dict), anon_kb and shmem_kb (its PSS of anonymous and
shared memory after the imports, before the load), tensors and bytes, and
with --verify a digest of every tensor's name, dtype, shape and bytes. A
loader that cannot run here answers {"error": "..."} and exits 1."""

import glob
import json
import os
import resource
import sys
import time

T_START = time.monotonic()
STAMPS = {}   # a loader's own steps, by name, in time.monotonic()


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rollup_kb():
    """This process's PSS of anonymous and of shared memory (smaps_rollup)."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Pss_Anon", "Pss_Shmem"):
                out[k] = int(v.split()[0])
    return out.get("Pss_Anon", 0), out.get("Pss_Shmem", 0)


def files_of(model):
    files = sorted(glob.glob(os.path.join(model, "*.safetensors")))
    if not files:
        raise RuntimeError("no .safetensors files in %s" % model)
    return files


def load_safetensors(a):
    """safetensors' load_file, each file in turn (what transformers and vLLM's
    default loader call)."""
    from safetensors.torch import load_file

    sd = {}
    for f in files_of(a.model):
        sd.update(load_file(f, device=a.device))
    return sd, None


def load_fastsafetensors(a):
    """fastsafetensors' SafeTensorsFileLoader, its default threads and bounce
    buffer, without GPUDirect Storage (nogds: none here); every file in one
    copy_files_to_device, each tensor a view of its buffer."""
    import torch
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup

    dev = "cuda:0" if a.device == "cuda" else "cpu"
    loader = SafeTensorsFileLoader(SingleGroup(), device=dev, nogds=True)
    loader.add_filenames({0: files_of(a.model)})
    fb = loader.copy_files_to_device()
    sd = {k: fb.get_tensor(k) for k in fb.key_to_rank_lidx}
    if a.device == "cuda":
        torch.cuda.synchronize()
    return sd, (loader, fb)


def load_runai(a):
    """Run:ai Model Streamer's SafetensorsStreamer over every file at once,
    its default concurrency, owned tensors (valid after the iteration)."""
    from runai_model_streamer import SafetensorsStreamer

    sd = {}
    with SafetensorsStreamer() as s:
        s.stream_files(files_of(a.model), device="cpu")
        for name, t in s.get_tensors():
            sd[name] = t.to(a.device) if a.device != "cpu" else t
    return sd, None


def load_tensorizer(a):
    """tensorizer's TensorDeserializer of its own file (made from the same
    weights by tools/bench-peers), its reader threads chosen by itself."""
    from tensorizer import TensorDeserializer

    d = TensorDeserializer(a.tensorizer_file, device=a.device, lazy_load=False)
    return dict(d.items()), d


def load_instanttensor(a):
    """InstantTensor's safe_open of every file at once (CUDA only)."""
    import torch
    from instanttensor import safe_open

    with safe_open(files_of(a.model), framework="pt", device=0 if a.device == "cuda" else a.device) as f:
        sd = {k: t for k, t in f.tensors()}
    torch.cuda.synchronize()
    return sd, None


def load_wsrv(a):
    """wsrv: connect to wsrvd (retrying until its socket answers: a cold
    start runs beside it), attach, wait for the model whole, state_dict()
    (every tensor a zero-copy view of the shared pages)."""
    import wsrv

    deadline = time.monotonic() + 900
    while True:
        try:
            c = wsrv.connect(a.socket, name="bench-peers")
            break
        except (wsrv.WsrvError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    STAMPS["t_connected"] = time.monotonic()
    m = c.attach("m")
    m.wait(timeout=900)
    STAMPS["t_ready"] = time.monotonic()
    sd = m.state_dict()
    if a.device == "cuda":
        sd = {k: v.to("cuda") for k, v in sd.items()}
    return sd, (c, m)


def touch(sd):
    """Reads one byte of every page the CPU tensors span (merged spans, so
    that the pass costs the faults and not a Python call per tensor): a
    state_dict is complete when its bytes are in this process's memory,
    which for a loader that maps files or shared pages is its first pass."""
    import ctypes

    import numpy as np

    spans = sorted((t.data_ptr(), t.numel() * t.element_size()) for t in sd.values()
                   if t.device.type == "cpu" and t.numel())
    merged = []
    for p, n in spans:
        if merged and p <= merged[-1][0] + merged[-1][1] + 4096:
            q, m = merged[-1]
            merged[-1] = (q, max(m, p + n - q))
        else:
            merged.append((p, n))
    total = 0
    for p, n in merged:
        a = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(p))
        total += int(a[::4096].sum(dtype=np.uint64)) + int(a[-1])
    return total


def load_none(a):
    """No loader: the floor every row stands on (python, torch, the pass)."""
    return {}, None


LOADERS = {
    "none": load_none,
    "wsrv": load_wsrv,
    "safetensors": load_safetensors,
    "fastsafetensors": load_fastsafetensors,
    "runai": load_runai,
    "tensorizer": load_tensorizer,
    "instanttensor": load_instanttensor,
}


def digest(sd):
    """blake2b of every tensor's name, dtype, shape and bytes, by name."""
    import hashlib

    import torch

    h = hashlib.blake2b(digest_size=16)
    for k in sorted(sd):
        t = sd[k].detach().to("cpu").contiguous()
        h.update(("%s %s %s\n" % (k, str(t.dtype).replace("torch.", ""), list(t.shape))).encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def fresh_rate(size=1 << 30):
    """GB/s of a fill into fresh anonymous pages, and again into the same,
    present pages: the first decides every cold figure on this machine."""
    import torch

    t0 = time.monotonic()
    b = torch.empty(size, dtype=torch.uint8)
    b.fill_(1)
    t1 = time.monotonic()
    b.fill_(2)
    t2 = time.monotonic()
    print(json.dumps({"fresh_gbps": size / 1e9 / (t1 - t0), "present_gbps": size / 1e9 / (t2 - t1)}))


PACKAGES = {"none": "torch", "wsrv": None, "safetensors": "safetensors", "fastsafetensors": "fastsafetensors",
            "runai": "runai-model-streamer", "tensorizer": "tensorizer", "instanttensor": "instanttensor"}


def versions():
    """Each loader's installed version (null where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": version("torch"), "python": sys.version.split()[0]}
    for k, pkg in PACKAGES.items():
        try:
            out[k] = version(pkg) if pkg else __import__("wsrv").version()
        except (PackageNotFoundError, ImportError, AttributeError):
            out[k] = None
    print(json.dumps(out))


def tensorizer_make(model, out):
    """The model's weights in tensorizer's own format (it reads no safetensors)."""
    from safetensors.torch import load_file
    from tensorizer import TensorSerializer

    sd = {}
    for f in files_of(model):
        sd.update(load_file(f))      # views of the files' pages: no copy
    s = TensorSerializer(out)
    try:
        s.write_state_dict(sd)
    except RuntimeError as e:        # its file keeps 256 KiB for the tensors' index
        sys.exit("%s (%d tensors)" % (e, len(sd)))
    s.close()


def main():
    import argparse

    if sys.argv[1:2] == ["fresh"]:
        return fresh_rate()
    if sys.argv[1:2] == ["versions"]:
        return versions()
    if sys.argv[1:2] == ["tensorizer-make"]:
        return tensorizer_make(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser()
    ap.add_argument("loader", choices=sorted(LOADERS))
    ap.add_argument("device", choices=("cpu", "cuda"))
    ap.add_argument("model")
    ap.add_argument("--socket")
    ap.add_argument("--tensorizer-file")
    ap.add_argument("--verify", action="store_true")
    a = ap.parse_args()
    import torch  # noqa: F401  (every loader's; imported before the clock starts)

    anon, shmem = rollup_kb()
    c0, t_imported = cpu_s(), time.monotonic()
    try:
        sd, keep = LOADERS[a.loader](a)
    except Exception as e:  # a loader that cannot run here says why, in one line
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}),
              flush=True)
        sys.exit(1)
    t_sd = time.monotonic()
    touch(sd)
    t_done, c1 = time.monotonic(), cpu_s()
    out = {"t_start": T_START, "t_imported": t_imported, "t_sd": t_sd, "t_done": t_done, "cpu_s": c1 - c0,
           "anon_kb": anon, "shmem_kb": shmem, "tensors": len(sd),
           "bytes": sum(t.numel() * t.element_size() for t in sd.values()), **STAMPS}
    if a.verify:
        out["digest"] = digest(sd)
    print(json.dumps(out), flush=True)
    sys.stdin.read()     # hold the tensors until the parent has measured
    del keep


if __name__ == "__main__":
    main()
