# SPDX-License-Identifier: MIT
"""A connection to wsrvd."""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional

from ._lib import (ConnectOpts, ModelInfo, ModelStats, RegionInfo, S, ServerStats, check, lib, new,
                   cstr, text)
from .model import Model


def _fields(s: ctypes.Structure) -> dict[str, Any]:
    """A result struct as a dict (strings decoded)."""
    out: dict[str, Any] = {}
    for field in s._fields_:
        f, t = field[0], field[1]
        if f not in ("struct_size", "reserved", "reserved32"):
            v = getattr(s, f)
            out[f] = text(v) if t is ctypes.c_char_p else v
    return out


class Client:
    """A connection (wsrv.connect). A context manager."""

    def __init__(self, socket: Optional[str] = None, name: Optional[str] = None,
                 timeout_ms: int = 0, wait: float = 0) -> None:
        self._ptr = ctypes.c_void_p()
        if not 0 <= wait <= 86400:
            raise ValueError(f"wait={wait!r}: seconds from 0 to 86400")
        opts = new(ConnectOpts, timeout_ms=timeout_ms, client_name=cstr(name or "python", "a client name"),
                   wait_ms=int(wait * 1000))
        check(lib.wsrv_connect(cstr(socket, "a socket path") if socket else None, ctypes.byref(opts),
                               ctypes.byref(self._ptr)), "connect")

    def _p(self) -> ctypes.c_void_p:
        if not self._ptr:
            raise ValueError("the client is closed")
        return self._ptr

    def models(self) -> list[dict[str, Any]]:
        """The models served: a list of dicts (wsrv_model_info's fields)."""
        lst = ctypes.c_void_p()
        check(lib.wsrv_list_models(self._p(), ctypes.byref(lst)), "list models")
        try:
            out = []
            for i in range(lib.wsrv_model_list_count(lst)):
                mi = new(ModelInfo)
                check(lib.wsrv_model_list_at(lst, i, ctypes.byref(mi)))
                out.append(_fields(mi))
            return out
        finally:
            lib.wsrv_model_list_free(lst)

    def stats(self) -> dict[str, Any]:
        """The server's counters: its totals, "models" and "regions"."""
        st = ctypes.c_void_p()
        check(lib.wsrv_stats(self._p(), ctypes.byref(st)), "stats")
        try:
            sv = new(ServerStats)
            check(lib.wsrv_stats_server(st, ctypes.byref(sv)))
            out = _fields(sv)
            out["models"] = [_fields(self._at(lib.wsrv_stats_model, ModelStats, st, i))
                             for i in range(lib.wsrv_stats_model_count(st))]
            out["regions"] = [_fields(self._at(lib.wsrv_stats_region, RegionInfo, st, i))
                              for i in range(lib.wsrv_stats_region_count(st))]
            return out
        finally:
            lib.wsrv_stats_free(st)

    @staticmethod
    def _at(fn: Callable[..., int], struct: type[S], st: ctypes.c_void_p, i: int) -> S:
        s = new(struct)
        check(fn(st, i, ctypes.byref(s)))
        return s

    def fileno(self) -> int:
        """The connection's fd, for select/poll: readable when the server
        announced a new generation of an attached model (poll_events). It
        changes when the client connects again after a server restart."""
        return check(lib.wsrv_client_fd(self._p()))

    def poll_events(self) -> int:
        """Takes in what the server sent unasked, without blocking: how many
        attached models have a newer generation than they map."""
        return check(lib.wsrv_client_poll_events(self._p()))

    def reload(self, name: str, path: Optional[str] = None) -> None:
        """Asks for a new generation of model name (root or the server's
        user); returns once loading has started."""
        check(lib.wsrv_reload(self._p(), cstr(name, "a model name"), cstr(path, "a path") if path else None),
              f"reload {name}")

    def attach(self, name: str) -> Model:
        """Attaches a model: a Model (a context manager)."""
        return Model(self._p(), name)

    def close(self) -> None:
        """Disconnects; attached models stay readable until closed."""
        if self._ptr:
            lib.wsrv_disconnect(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(socket: Optional[str] = None, name: Optional[str] = None, timeout_ms: int = 0,
            wait: float = 0) -> Client:
    """Connects to wsrvd at socket (None: $WSRV_SOCKET, else
    $XDG_RUNTIME_DIR/wsrv.sock, else /run/wsrv/wsrv.sock). wait: seconds
    to keep trying while no server answers there (a worker that starts
    before wsrvd); WsrvError (ENOENT or ECONNREFUSED) names the socket
    once they have passed."""
    return Client(socket, name, timeout_ms, wait)
