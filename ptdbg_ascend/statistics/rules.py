"""The two dump formats' statistics rules as objects: :data:`LEGACY` (the pkl's ``[max, min, mean, l2norm]``,
``eager.py``) and :data:`MSPROBE` (dump.json's ``Max, Min, Mean, Norm`` and ``*_except_inf_nan``,
``msprobe_rules.py``). They differ in what they reduce (ints in float64 or float32, bool as numbers or
any/all, a complex tensor's norm, a 0-d value's norm), in which tensors a device batch can take and in which
the writer thread reads from its copy; the planner (``planner.py``) asks them and nothing else does.

Each rules object answers:

* ``eager(tensor)``: the four numbers now, on the calling thread;
* ``device_test(defer_cpu)``: the test of whether a device batch can hold a tensor's numbers (``defer_cpu``: CPU
  tensors too), made once per planner: it runs for every recorded tensor;
* ``device(batch, tensor)``: queue them in ``batch`` (a pending value, or the numbers where there is nothing
  to read back);
* ``takes_writer(tensor, defer_cpu)``: whether the writer thread reads them from the copy it saves;
* ``from_copy(copy)``: the numbers of that copy (a numpy array for the legacy format, a host tensor for msprobe).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List

from ptdbg_ascend.inside import Inside
from ptdbg_ascend.log import logger
from ptdbg_ascend.statistics import fused_plan, msprobe_rules
from ptdbg_ascend.statistics.device_batch import DeviceStatisticsBatch
from ptdbg_ascend.statistics.eager import EMPTY, Statistics, array_statistics, tensor_statistics, torch_types

# A tensor whose file a writer thread saves has its statistics read by that thread from the copy it saves when
# it has at least this many elements: there the passes over the data (torch and numpy release the GIL) overlap
# with training. Below it they stay on the training thread, where they cost a few microseconds: on the writer
# thread their Python work competes with training for the GIL and slowed the writer, which sets the pace
# of a dump of many small tensors.
WRITER_STATISTICS_MIN_ELEMENTS = 65536


class LegacyRules:
    """The legacy pkl's rules (``eager.py``'s table)."""

    name = "legacy"
    eager = staticmethod(tensor_statistics)

    def __init__(self) -> None:
        self._writer_dtypes: Any = None  # torch's float32, float64, bfloat16, looked up on first use

    @staticmethod
    def device_test(defer_cpu: bool) -> Callable[[Any], bool]:
        """Any tensor off the CPU (``defer_cpu``: any tensor): the batch computes at once what it cannot hold."""
        return _any_tensor if defer_cpu else _off_cpu

    @staticmethod
    def device(batch: DeviceStatisticsBatch, tensor: Any) -> Statistics:
        """The four numbers queued in ``batch``: in its fused queue where it takes the tensor, else by the
        tensor's own reductions (those of an empty, meta or special tensor at once)."""
        queued = batch.queued(tensor, fused_plan.LEGACY)
        return batch.add(tensor) if queued is None else queued

    def takes_writer(self, tensor: Any, defer_cpu: bool) -> bool:
        """A float32/float64/bfloat16 CPU tensor of at least WRITER_STATISTICS_MIN_ELEMENTS elements (its npy
        copy is float32 or float64: numpy reduces it on the writer thread), whatever ``defer_cpu``."""
        dtypes = self._writer_dtypes
        if dtypes is None:
            torch = torch_types().torch
            dtypes = self._writer_dtypes = frozenset((torch.float32, torch.float64, torch.bfloat16))
        return tensor.dtype in dtypes and tensor.numel() >= WRITER_STATISTICS_MIN_ELEMENTS \
            and tensor.device.type == "cpu"

    @staticmethod
    def from_copy(copy: Any) -> Statistics:
        """``array_statistics`` of the npy's array (raises as numpy does: the writer's job then fails)."""
        return array_statistics(copy)


class MsprobeRules:
    """msprobe 1.0.4's rules (``msprobe_rules.py``)."""

    name = "msprobe"
    eager = staticmethod(msprobe_rules.tensor_statistics_msprobe)
    device = staticmethod(msprobe_rules.on_device)

    @staticmethod
    def device_test(defer_cpu: bool) -> Callable[[Any], bool]:
        """``msprobe_rules.defer_candidate``: off the CPU (``defer_cpu``: any), not bool, complex or empty."""
        return functools.partial(msprobe_rules.defer_candidate, on_cpu=defer_cpu)

    @staticmethod
    def takes_writer(tensor: Any, defer_cpu: bool) -> bool:
        """A contiguous CPU tensor of a real or integer dtype (not bool) with a dimension and at least
        WRITER_STATISTICS_MIN_ELEMENTS elements; never with ``defer_cpu``. Contiguous only: the copy then has
        its layout, so every reduction runs in the same order and gives the numbers the call would have."""
        if defer_cpu:
            return False
        return (tensor.is_cpu and tensor.dim() > 0 and tensor.numel() >= WRITER_STATISTICS_MIN_ELEMENTS
                and not tensor.is_complex() and tensor.dtype is not torch_types().torch.bool
                and tensor.is_contiguous())

    @staticmethod
    def from_copy(copy: Any) -> Statistics:
        """The leaf's numbers of the host copy (``*_except_inf_nan`` included); never raises (nulls, said once)."""
        try:
            with Inside():  # the tool's own torch calls are not API calls of the script
                return msprobe_rules.eager_statistics(copy)
        except Exception as error:  # noqa: BLE001 - a dump must never stop training
            if not _WARNED:
                _WARNED.append(error)
                logger.warning("Statistics of a {} tensor cannot be computed ({}: {}); its leaf holds null "
                               "statistics.".format(copy.dtype, type(error).__name__, error))
            return list(EMPTY)


_WARNED: List[BaseException] = []


def _off_cpu(tensor: Any) -> bool:
    return not tensor.is_cpu


def _any_tensor(_tensor: Any) -> bool:
    return True

LEGACY = LegacyRules()
MSPROBE = MsprobeRules()
