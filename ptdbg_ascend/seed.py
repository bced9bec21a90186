"""``seed_all``: fix every random generator the guide lists, so two runs see the same data."""

from __future__ import annotations

import os
import random

from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.log import logger

MAX_SEED = 2 ** 32 - 1


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> None:
    """Seed python ``random``, ``PYTHONHASHSEED``, numpy, torch, every CUDA device and every NPU
    (when ``torch_npu`` is installed); set cuDNN to deterministic, non-benchmarking kernels.

    Args:
        seed: an int in [0, 2**32 - 1]. Default 1234.
        mode: True also calls ``torch.use_deterministic_algorithms(True)`` (and sets
            ``CUBLAS_WORKSPACE_CONFIG`` as CUDA requires for it). Default False.
        rm_dropout: True makes every dropout API of ``torch.nn.functional`` run with p=0 (opt-in: the
            original tool did this silently). Default False.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParameterError("seed", seed, f"must be an int in [0, {MAX_SEED}]")
    if not 0 <= seed <= MAX_SEED:
        raise ParameterError("seed", seed, f"must be between 0 and {MAX_SEED}")
    if not isinstance(mode, bool):
        raise ParameterError("mode", mode, "must be a bool (True enables deterministic algorithms)")
    if not isinstance(rm_dropout, bool):
        raise ParameterError("rm_dropout", rm_dropout, "must be a bool")

    import numpy as np
    import torch

    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)
    if mode:
        # cuBLAS refuses deterministic mode without a fixed workspace; set it before the first GEMM.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(mode)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # The original set `cudnn.enable` (a typo, so nothing happened); we keep cuDNN enabled on purpose:
    # deterministic cuDNN kernels are exact enough, and disabling it changes which kernels run.
    from ptdbg_ascend.device import torch_npu_module

    torch_npu = torch_npu_module()
    if torch_npu is not None:
        torch_npu.npu.manual_seed(seed)
        torch_npu.npu.manual_seed_all(seed)
    if rm_dropout:
        _remove_dropout()
    logger.info(f"Random seed is set to {seed} (deterministic algorithms: {mode}).")


def _remove_dropout() -> None:
    """Replace the dropout functions of ``torch.nn.functional`` by versions with p=0 (idempotent).

    The replacement wraps whatever is installed now (the dump wrapper too, so dropout is still dumped).
    """
    import torch.nn.functional as functional

    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        current = getattr(functional, name, None)
        if current is None or getattr(current, "_ptdbg_no_dropout", False):
            continue
        functional.__dict__[name] = _zero_p(current)
    logger.info("For precision comparison, the probability p in the dropout methods is set to 0.")


def _zero_p(function):
    def dropout_with_p_zero(input, p=0.5, *args, **kwargs):  # noqa: A002 - torch's own argument name
        kwargs.pop("p", None)
        return function(input, 0.0, *args, **kwargs)

    dropout_with_p_zero._ptdbg_no_dropout = True
    dropout_with_p_zero.__name__ = getattr(function, "__name__", "dropout")
    dropout_with_p_zero.__wrapped__ = function
    return dropout_with_p_zero
