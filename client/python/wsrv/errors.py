# SPDX-License-Identifier: MIT
"""The package's exception."""

from __future__ import annotations

import errno as _errno
import os


class WsrvError(OSError):
    """A libwsrv call failed: .errno is the positive errno value, .message
    the library's sentence (wsrv_last_error)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.message = message

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno, str(self.errno))
        return f"[{name}] {self.message or os.strerror(self.errno)}"
