# SPDX-License-Identifier: MIT
"""Plans (wsrv_plan_parse): where each tensor lives, and the tp_plan."""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Optional, Union

from ._lib import check, lib

#: What a plan is given as: a dict, JSON text, or a path to a JSON file.
PlanSpec = Union[dict[str, Any], str, "os.PathLike[str]"]


class Plan:
    """A parsed plan. From a dict ({"residency": ..., "budget": "4G",
    "tp_plan": ..., "share_resident": true}), JSON text, or a file path."""

    def __init__(self, spec: PlanSpec) -> None:
        if isinstance(spec, dict):
            data = json.dumps(spec).encode()
        elif isinstance(spec, str) and spec.lstrip().startswith("{"):
            data = spec.encode()
        elif isinstance(spec, (str, os.PathLike)):
            with open(spec, "rb") as f:
                data = f.read()
        else:
            raise TypeError("a plan is a dict, JSON text or a path")
        self.ptr: Optional[ctypes.c_void_p] = ctypes.c_void_p()
        check(lib.wsrv_plan_parse(data, len(data), ctypes.byref(self.ptr)), "plan")

    @staticmethod
    def of(spec: Union[Plan, PlanSpec, None]) -> Optional[Plan]:
        """spec as a Plan (None stays None)."""
        return spec if spec is None or isinstance(spec, Plan) else Plan(spec)

    def __del__(self) -> None:
        if getattr(self, "ptr", None):
            lib.wsrv_plan_free(self.ptr)
            self.ptr = None
