"""The model of the re-run tests (``test_rerun.py``), dumped by the tool itself in a fresh interpreter:

    python rerun_model.py DUMP_PATH KIND [PLANT]

``KIND``: ``tensor`` / ``statistics`` (``PrecisionDebugger(task=..., level="L1")``: ``DUMP_PATH/step0/rank/
dump.json``) or ``legacy`` (``register_hook`` + ``set_dump_switch("ON", mode="all")``: a pkl + npy under
``DUMP_PATH``). ``PLANT``: ``kernel`` makes ``torch.nn.functional.gelu`` 2 % off in float32, ``linear`` the same
of ``torch.nn.functional.linear``, ``backward`` makes gelu's backward 2 % off and its forward exact (each installed
before the tool wraps the APIs, so the dump records it as the one API call it is on a device); ``input`` makes the input
batch 1 % larger, every kernel exact; none: the reference run.
"""

from __future__ import annotations

import sys

import torch

KERNEL_ERROR = 1.02  # the planted gelu's output is 2 % too large
INPUT_SCALE = 1.01  # the planted batch is 1 % larger
_REAL_GELU = torch.nn.functional.gelu
_REAL_LINEAR = torch.nn.functional.linear


def planted_gelu(input, approximate="none"):  # noqa: A002 -- the signature of torch.nn.functional.gelu
    """gelu 2 % off for float32 inputs (a faulty device kernel); exact otherwise."""
    output = _REAL_GELU(input, approximate=approximate)
    return output * KERNEL_ERROR if input.dtype == torch.float32 else output


def planted_linear(input, weight, bias=None):  # noqa: A002 -- the signature of torch.nn.functional.linear
    """linear 2 % off (a faulty device kernel)."""
    return _REAL_LINEAR(input, weight, bias) * KERNEL_ERROR


def planted_gelu_backward(input, approximate="none"):  # noqa: A002
    """gelu exact, its gradient 2 % off: ``scaled - (scaled - exact)`` is ``exact`` to the bit (Sterbenz: the two
    are within a factor 2) and differentiates as ``scaled``; what runs inside the planted call is not recorded."""
    exact = _REAL_GELU(input, approximate=approximate)
    scaled = exact * KERNEL_ERROR
    return scaled - (scaled - exact).detach()


def model_and_batch(plant: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    batch = torch.randn(4, 16)
    return model, batch * INPUT_SCALE if plant == "input" else batch


def train_step(model, batch) -> None:
    model(batch).pow(2).sum().backward()


def main(dump_path: str, kind: str, plant: str) -> None:
    if plant == "kernel":
        torch.nn.functional.gelu = planted_gelu
    if plant == "linear":
        torch.nn.functional.linear = planted_linear
    if plant == "backward":
        torch.nn.functional.gelu = planted_gelu_backward
    model, batch = model_and_batch(plant)
    if kind == "legacy":
        from ptdbg_ascend import acc_cmp_dump, register_hook, set_dump_path, set_dump_switch

        set_dump_path(dump_path + "/dump.pkl", dump_tag="rerun")
        register_hook(model, acc_cmp_dump)
        set_dump_switch("ON", mode="all")
        train_step(model, batch)
        set_dump_switch("OFF")
        return
    from ptdbg_ascend import PrecisionDebugger

    debugger = PrecisionDebugger(dump_path=dump_path, task=kind, level="L1")
    debugger.start()
    train_step(model, batch)
    debugger.stop()
    debugger.step()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
