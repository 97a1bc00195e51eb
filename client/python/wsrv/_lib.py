# SPDX-License-Identifier: MIT
"""libwsrv through ctypes: the structures of wsrv.h and the functions'
prototypes. The library is found at $WSRV_LIB, else next to an installed
package, else by the loader's search (libwsrv.so.1)."""

from __future__ import annotations

import ctypes
import operator
import ctypes.util
import os
from typing import Any, Optional, TypeVar

from .errors import WsrvError

u32, i32, u64, dbl = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_double
charp, vptr = ctypes.c_char_p, ctypes.c_void_p
u64p = ctypes.POINTER(u64)

#: A ctypes structure of wsrv.h (every one of them has struct_size first).
S = TypeVar("S", bound=ctypes.Structure)


def _struct(name: str, fields: list[tuple[str, Any]]) -> type[ctypes.Structure]:
    """A wsrv.h struct: struct_size first, as the header has it."""
    return type(name, (ctypes.Structure,), {"_fields_": [("struct_size", u32)] + fields})


ConnectOpts = _struct("ConnectOpts", [("timeout_ms", i32), ("client_name", charp), ("wait_ms", i32),
                                      ("reserved32", u32), ("reserved", u64 * 3)])
TensorInfo = _struct("TensorInfo", [
    ("name", charp), ("dtype", ctypes.c_int), ("rank", u32), ("shape", u64p), ("layer", i32),
    ("segment", u32), ("offset", u64), ("size", u64), ("xxh3", u64), ("data", vptr),
    ("held_offset", u64), ("held_size", u64), ("reserved", u64 * 2)])
HeldInfo = _struct("HeldInfo", [
    ("first", u32), ("last", u32), ("world", u32), ("stages", u32), ("bytes", u64),
    ("reserved", u64 * 4)])
LayerInfo = _struct("LayerInfo", [
    ("index", i32), ("segment", u32), ("offset", u64), ("length", u64), ("bytes", u64),
    ("first", u32), ("count", u32), ("data", vptr), ("reserved", u64 * 4)])
ModelInfo = _struct("ModelInfo", [
    ("tensors", u32), ("layers", u32), ("segments", u32), ("attached", u32), ("name", charp),
    ("path", charp), ("numa", charp), ("tensor_bytes", u64), ("arena_bytes", u64),
    ("page_size", u64), ("load_seconds", dbl), ("held_first", u32), ("held_last", u32),
    ("held_world", u32), ("loading", u32), ("held_bytes", u64), ("pages", charp)])
ServerStats = _struct("ServerStats", [
    ("clients", u32), ("attachments", u32), ("open_fds", u32), ("server_version", charp),
    ("uptime_seconds", dbl), ("leases", u64), ("requests", u64), ("errors", u64),
    ("clients_total", u64), ("arena_bytes", u64), ("rss_bytes", u64), ("started_unix", dbl),
    ("first_started_unix", dbl), ("max_clients", u32), ("max_clients_fitted", u32),
    ("declined", u64)])
ModelStats = _struct("ModelStats", [
    ("attached", u32), ("name", charp), ("fetches", u64), ("leases", u64), ("arena_bytes", u64),
    ("generation", u64), ("adopted", i32), ("reserved32", u32), ("disk_bytes", u64),
    ("reserved", u64 * 1)])
RegionInfo = _struct("RegionInfo", [
    ("id", u32), ("holders", u32), ("writer_pid", u32), ("model", charp), ("device", charp),
    ("committed", i32), ("kind", i32), ("bytes", u64), ("fingerprint", u64),
    ("generation", u64), ("age_seconds", dbl), ("waits", u64), ("reserved", u64 * 3)])
HostOpts = _struct("HostOpts", [("numa_node", i32), ("bandwidth_gbps", dbl),
                                ("device_name", charp), ("reserved", u64 * 3)])
CudaOpts = _struct("CudaOpts", [("device", i32), ("compute_stream", vptr),
                                ("register_chunk_bytes", u64), ("reserved", u64 * 3)])
StreamOpts = _struct("StreamOpts", [
    ("slots", u32), ("rank", i32), ("world", i32), ("trace_path", charp), ("share", u32),
    ("share_timeout_ms", u32), ("reserved", u64 * 3)])
StreamStats = _struct("StreamStats", [
    ("slots", u32), ("bytes_copied", u64), ("copies", u64), ("acquires", u64), ("passes", u64),
    ("copy_seconds", dbl), ("wait_seconds", dbl), ("hidden_fraction", dbl),
    ("resident_bytes", u64), ("slot_bytes", u64), ("device_bytes", u64),
    ("pass_copy_bytes", u64), ("register_seconds", dbl), ("register_bytes", u64),
    ("shared_bytes", u64), ("private_bytes", u64), ("resident_copies", u64), ("service_bytes", u64),
    ("service_fallbacks", u64), ("peer_bytes", u64), ("peer_host_bytes", u64),
    ("reserved", u64 * 1)])
View = _struct("View", [("present", i32), ("rank", u32), ("shape", u64p), ("bytes", u64),
                        ("reserved", u64 * 4)])
Layout = _struct("Layout", [("offset", u64), ("row_bytes", u64), ("rows", u64),
                            ("row_pitch", u64), ("reserved", u64 * 4)])
#: One tensor of wsrv_stream_views (no struct_size: rows grow at their end).
ViewRow: type[ctypes.Structure] = type("ViewRow", (ctypes.Structure,), {"_fields_": [
    ("data", vptr), ("offset", u64), ("size", u64), ("bytes", u64), ("part_offset", u64),
    ("row_bytes", u64), ("rows", u64), ("row_pitch", u64), ("shape", u64 * 16), ("dtype", i32),
    ("layer", i32), ("rank", u32), ("segment", u32), ("present", i32), ("reserved", u32 * 3)]})
ExpertStats = _struct("ExpertStats", [
    ("slots", u32), ("slots_used", u32), ("slots_pinned", u32), ("slot_bytes", u64),
    ("experts", u64), ("acquires", u64), ("hits", u64), ("misses", u64), ("prefetch_hits", u64),
    ("prefetches", u64), ("evictions", u64), ("bytes_copied", u64), ("copies", u64),
    ("passes", u64), ("wait_seconds", dbl), ("reserved", u64 * 6)])
Sharing = _struct("Sharing", [
    ("role", i32), ("region_id", u32), ("writer_pid", u32), ("device", charp), ("note", charp),
    ("region_bytes", u64), ("wait_seconds", dbl), ("reserved", u64 * 4)])

P = ctypes.POINTER
_PROTOS = {
    "wsrv_version": (charp, []),
    "wsrv_last_error": (charp, []),
    "wsrv_dtype_name": (charp, [ctypes.c_int]),
    "wsrv_default_socket": (charp, []),
    "wsrv_connect": (ctypes.c_int, [charp, P(ConnectOpts), P(vptr)]),
    "wsrv_disconnect": (None, [vptr]),
    "wsrv_list_models": (ctypes.c_int, [vptr, P(vptr)]),
    "wsrv_model_list_count": (ctypes.c_size_t, [vptr]),
    "wsrv_model_list_at": (ctypes.c_int, [vptr, ctypes.c_size_t, P(ModelInfo)]),
    "wsrv_model_list_free": (None, [vptr]),
    "wsrv_stats": (ctypes.c_int, [vptr, P(vptr)]),
    "wsrv_stats_server": (ctypes.c_int, [vptr, P(ServerStats)]),
    "wsrv_stats_model_count": (ctypes.c_size_t, [vptr]),
    "wsrv_stats_model": (ctypes.c_int, [vptr, ctypes.c_size_t, P(ModelStats)]),
    "wsrv_stats_region_count": (ctypes.c_size_t, [vptr]),
    "wsrv_stats_region": (ctypes.c_int, [vptr, ctypes.c_size_t, P(RegionInfo)]),
    "wsrv_stats_free": (None, [vptr]),
    "wsrv_attach": (ctypes.c_int, [vptr, charp, P(vptr)]),
    "wsrv_detach": (None, [vptr]),
    "wsrv_model_tensor_count": (ctypes.c_size_t, [vptr]),
    "wsrv_model_tensor_name": (ctypes.c_char_p, [vptr, ctypes.c_size_t]),
    "wsrv_model_names": (ctypes.c_int, [vptr, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "wsrv_model_wait": (ctypes.c_int, [vptr, ctypes.c_int32, ctypes.c_int]),
    "wsrv_model_progress": (ctypes.c_int, [vptr, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64)]),
    "wsrv_model_tensor": (ctypes.c_int, [vptr, ctypes.c_size_t, P(TensorInfo)]),
    "wsrv_model_find": (ctypes.c_int, [vptr, charp, P(TensorInfo)]),
    "wsrv_model_layer_count": (ctypes.c_size_t, [vptr]),
    "wsrv_model_layer_at": (ctypes.c_int, [vptr, ctypes.c_size_t, P(LayerInfo)]),
    "wsrv_model_layer_info": (ctypes.c_int, [vptr, ctypes.c_size_t, P(LayerInfo)]),
    "wsrv_model_config": (vptr, [vptr, P(ctypes.c_size_t)]),
    "wsrv_model_fp8_block": (ctypes.c_int, [vptr, u64 * 2]),
    "wsrv_model_held": (ctypes.c_int, [vptr, ctypes.POINTER(HeldInfo)]),
    "wsrv_device_host": (ctypes.c_int, [P(HostOpts), P(vptr)]),
    "wsrv_device_cuda": (ctypes.c_int, [P(CudaOpts), P(vptr)]),
    "wsrv_device_destroy": (None, [vptr]),
    "wsrv_plan_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, P(vptr)]),
    "wsrv_plan_free": (None, [vptr]),
    "wsrv_stream_open": (ctypes.c_int, [vptr, vptr, vptr, P(StreamOpts), P(vptr)]),
    "wsrv_stream_acquire": (ctypes.c_int, [vptr, i32]),
    "wsrv_stream_release": (ctypes.c_int, [vptr, i32]),
    "wsrv_stream_tensor_at": (ctypes.c_int, [vptr, ctypes.c_size_t, P(vptr)]),
    "wsrv_stream_residency": (ctypes.c_int, [vptr, ctypes.c_size_t]),
    "wsrv_stream_view": (ctypes.c_int, [vptr, ctypes.c_size_t, P(View)]),
    "wsrv_stream_layout": (ctypes.c_int, [vptr, ctypes.c_size_t, P(Layout)]),
    "wsrv_stream_views": (ctypes.c_int, [vptr, ctypes.c_size_t, ctypes.c_size_t, vptr, ctypes.c_size_t]),
    "wsrv_stream_stats": (ctypes.c_int, [vptr, P(StreamStats)]),
    "wsrv_stream_sharing": (ctypes.c_int, [vptr, P(Sharing)]),
    "wsrv_stream_report": (ctypes.c_int, [vptr]),
    "wsrv_stream_close": (None, [vptr]),
    "wsrv_stream_acquire_experts": (ctypes.c_int, [vptr, i32, P(u32), ctypes.c_size_t, P(vptr)]),
    "wsrv_stream_release_experts": (ctypes.c_int, [vptr, i32]),
    "wsrv_stream_prefetch_experts": (ctypes.c_int, [vptr, i32, P(u32), ctypes.c_size_t]),
    "wsrv_stream_pin_experts": (ctypes.c_int, [vptr, i32, P(u32), ctypes.c_size_t, ctypes.c_int]),
    "wsrv_stream_expert_stats": (ctypes.c_int, [vptr, i32, P(ExpertStats)]),
    "wsrv_stream_experts_resident": (ctypes.c_int, [vptr, i32, P(u32), ctypes.c_size_t,
                                                    P(ctypes.c_size_t)]),
    "wsrv_client_fd": (ctypes.c_int, [vptr]),
    "wsrv_client_poll_events": (ctypes.c_int, [vptr]),
    "wsrv_model_generation": (ctypes.c_int, [vptr, P(u64), P(u64)]),
    "wsrv_reload": (ctypes.c_int, [vptr, charp, charp]),
    "wsrv_publish_begin": (ctypes.c_int, [vptr, charp, P(vptr)]),
    "wsrv_publish_tensor": (ctypes.c_int, [vptr, charp, P(vptr), P(u64)]),
    "wsrv_publish_commit": (ctypes.c_int, [vptr, P(u64)]),
    "wsrv_publish_abort": (None, [vptr]),
    "wsrv_publish_keep_reserved": (ctypes.c_int, [vptr]),
    "wsrv_publish_segment": (ctypes.c_int, [vptr, u32, P(vptr), P(u64)]),
    "wsrv_publish_write": (ctypes.c_int, [vptr, charp, u64, vptr, u64]),
    "wsrv_publish_keep_current": (ctypes.c_int, [vptr]),
}


def _find() -> str:
    env = os.environ.get("WSRV_LIB")
    if env:
        return env
    # Installed by meson: the package in PREFIX/lib/python3/dist-packages,
    # the library in PREFIX/lib/<multiarch> or PREFIX/lib.
    prefix_lib = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                               "..", "..", ".."))
    for cand in (os.path.join(prefix_lib, "x86_64-linux-gnu"), prefix_lib):
        p = os.path.join(cand, "libwsrv.so.1")
        if os.path.exists(p):
            return p
    return ctypes.util.find_library("wsrv") or "libwsrv.so.1"


def _load() -> ctypes.CDLL:
    path = _find()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"wsrv: cannot load libwsrv ({path}): {e}. The package needs the C "
                          "library: install it from the wsrv tree (meson setup build-release -Dbuildtype=release && "
                          "ninja -C build-release install && ldconfig), or set WSRV_LIB to its path "
                          "(a build tree's build/client/libwsrv.so.1)") from None
    for name, (res, args) in _PROTOS.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


lib = _load()


def new(struct: type[S], **fields: Any) -> S:
    """An option struct with struct_size set."""
    s = struct(**fields)
    s.struct_size = ctypes.sizeof(struct)
    return s


def check(rc: int, what: Optional[str] = None) -> int:
    """A negative errno from libwsrv as a WsrvError with its sentence."""
    if rc < 0:
        msg = (lib.wsrv_last_error() or b"").decode("utf-8", "replace")
        raise WsrvError(-rc, f"{what}: {msg}" if what else msg)
    return rc


def cstr(value: object, what: str = "a name") -> bytes:
    """value (str) as the C string libwsrv takes. A NUL inside would cut
    it short there, so that attach("m\\x00other") attached m: refused."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{what} {value!r} holds a NUL character")
    return value.encode()


def whole(value: Any, what: str) -> int:
    """value as an int, refusing what is not a whole number (a float, a
    bool): float expert ids were truncated silently."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__} ({value!r})") from None


def rank_world(rank: Any, world: Any) -> tuple[int, int]:
    """rank and world checked: 1 <= world, 0 <= rank < world."""
    rank, world = whole(rank, "rank"), whole(world, "world")
    if world < 1:
        raise ValueError(f"world must be at least 1, not {world}")
    if not 0 <= rank < world:
        raise ValueError(f"rank must be from 0 to {world - 1}, not {rank}")
    return rank, world


def text(b: Optional[bytes]) -> str:
    """A string libwsrv returned, decoded ("" for NULL)."""
    return b.decode("utf-8", "replace") if b is not None else ""
