# SPDX-License-Identifier: MIT
"""wsrv for Python: attach to a wsrvd's models and take their weights as
zero-copy numpy and torch views, a rank's tensor-parallel state_dict, or a
layer stream. Pure Python over libwsrv.so.1 (ctypes); docs/python.md.

    import wsrv
    with wsrv.connect(name="worker") as c, c.attach("llama") as m:
        w = m["model.embed_tokens.weight"].torch()      # no copy
        sd = m.state_dict(plan={"tp_plan": {...}}, rank=0, world=2)
"""

from ._lib import lib as _libwsrv, text as _text
from .client import Client, connect
from .errors import WsrvError
from ._attached import Layer, Tensor
from .model import Model, StateDict
from .plan import Plan
from .publish import Publish
from .stream import Stream, StreamLayer


def version() -> str:
    """libwsrv's version."""
    return _text(_libwsrv.wsrv_version())


__all__ = ["Client", "connect", "Layer", "Model", "Plan", "Publish", "StateDict", "Stream", "StreamLayer",
           "Tensor", "WsrvError", "version"]
