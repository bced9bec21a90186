"""A recording stand-in for the parts of ``torch_npu`` that the overflow check and the ACL dump touch.

Not a simulator: it records every call in order (``module.calls``, tuples ``(name, *args)``) so tests
can assert the exact sequence and arguments, and it records which Python-level functions ran while an
ACL dump was open (``module.dumped_ops``: the names of the C functions and Python functions called
between ``init_dump`` and ``finalize_dump``), so a test can see that the API really was re-executed
inside the dump window. Build a fresh one per test with :func:`make_fake_torch_npu`.
"""

from __future__ import annotations

import sys
import types
from typing import Any, List, Optional


def make_fake_torch_npu(support_inf_nan: Optional[bool] = True, with_enable_overflow: bool = True) -> types.ModuleType:
    """A fresh fake ``torch_npu`` module.

    Args:
        support_inf_nan: what ``torch_npu._C._npu_is_support_inf_nan()`` answers; None leaves the function
            out (old torch_npu). Default True.
        with_enable_overflow: whether ``torch_npu._C._enable_overflow_npu`` exists. Default True.
    """
    module = types.ModuleType("torch_npu")
    module.__file__ = __file__
    calls: List[tuple] = []
    dumped_ops: List[str] = []
    module.calls = calls
    module.dumped_ops = dumped_ops
    # The global float status of the fake device: tests set it to simulate an overflowing kernel.
    module.float_status = [False]
    module.dumping = [False]

    def record(name: str):
        def function(*args: Any) -> Any:
            calls.append((name,) + args)

        function.__name__ = name.rsplit(".", 1)[-1]
        return function

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            dumped_ops.append(getattr(arg, "__name__", repr(arg)))
        elif event == "call":
            dumped_ops.append(frame.f_code.co_name)

    npu = types.ModuleType("torch_npu.npu")

    def init_dump() -> None:
        calls.append(("npu.init_dump",))
        module.dumping[0] = True
        sys.setprofile(profile)

    def set_dump(config_file: str) -> None:
        calls.append(("npu.set_dump", config_file))

    def synchronize() -> None:
        calls.append(("npu.synchronize",))

    def finalize_dump() -> None:
        sys.setprofile(None)
        module.dumping[0] = False
        calls.append(("npu.finalize_dump",))

    npu.init_dump = init_dump
    npu.set_dump = set_dump
    npu.synchronize = synchronize
    npu.finalize_dump = finalize_dump
    module.npu = npu

    c_module = types.ModuleType("torch_npu._C")
    if support_inf_nan is not None:
        def is_support_inf_nan() -> bool:
            calls.append(("_C._npu_is_support_inf_nan",))
            return bool(support_inf_nan)

        c_module._npu_is_support_inf_nan = is_support_inf_nan
    if with_enable_overflow:
        c_module._enable_overflow_npu = record("_C._enable_overflow_npu")

    def check_overflow() -> bool:
        calls.append(("_C._check_overflow_npu",))
        return module.float_status[0]

    def clear_overflow() -> None:
        calls.append(("_C._clear_overflow_npu",))
        module.float_status[0] = False

    c_module._check_overflow_npu = check_overflow
    c_module._clear_overflow_npu = clear_overflow
    module._C = c_module
    return module
