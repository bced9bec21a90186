"""The legacy function-call API (``from ptdbg_ascend import *``), kept signature-compatible with the
original tool's user guide.

These functions are deliberately thin: they name the arguments exactly as the guide does and hand
them to the module that owns the feature. Importing this module must not import torch, so a compare
script (``from ptdbg_ascend import *`` then ``compare(...)``) stays fast; every import of an
implementation module happens inside the function that needs it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from ptdbg_ascend.call_log import record_call as _record_call
from ptdbg_ascend.errors import ParameterError


class HookKind:
    """The two values ``register_hook`` accepts as ``hook``: :data:`acc_cmp_dump` and :data:`overflow_check`.

    They are markers, not functions to call: the tool installs its own wrappers.
    """

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.__doc__ = description

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ParameterError(
            self.name, "called directly", "pass it to register_hook",
            f"Example: register_hook(model, {self.name})",
        )

    def __repr__(self) -> str:
        return self.name


acc_cmp_dump = HookKind("acc_cmp_dump", "Dump API inputs/outputs for accuracy comparison (register_hook(model, acc_cmp_dump)).")
overflow_check = HookKind("overflow_check", "Detect overflow (inf/nan) per API and dump the overflowing calls.")


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> None:
    """Fix every random generator (python, PYTHONHASHSEED, numpy, torch, cuda, npu when present).

    Args:
        seed: the seed, an int in [0, 2**32 - 1]. Default 1234.
        mode: True enables deterministic algorithms (``torch.use_deterministic_algorithms``) and
            disables cuDNN benchmarking/non-deterministic kernels. Default False.
        rm_dropout: True forces the probability of every dropout API to 0 (the original did this
            silently; here it is opt-in). Default False.
    """
    _record_call("seed_all", locals())  # for compat.export_config; never raises
    from ptdbg_ascend.seed import seed_all as _seed_all

    _seed_all(seed=seed, mode=mode, rm_dropout=rm_dropout)


def set_dump_path(fpath: Optional[str] = None, dump_tag: str = "ptdbg_dump") -> None:
    """Set where dumps go: ``{dir of fpath}/{dump_tag}_v{version}/rank{R}/{prefix}{stem}.pkl`` and the
    npy directory ``{prefix}{stem}/`` beside it.

    Args:
        fpath: a ``.pkl`` file name such as ``"./dump_path/npu_dump.pkl"`` (the guide's form) or a
            directory (later versions' form; the stem is then ``dump``). Default None: the
            environment variable ``ASCEND_WORK_PATH`` + ``/dump_data``.
        dump_tag: the name of the directory under the path. Default ``"ptdbg_dump"``.
    """
    _record_call("set_dump_path", locals())  # for compat.export_config; never raises
    from ptdbg_ascend import legacy_dump as api

    api.set_dump_path(fpath, dump_tag)


def register_hook(
    model: Any,
    hook: HookKind,
    *,
    overflow_nums: Optional[int] = None,
    dump_mode: str = "api",
    dump_config: Optional[str] = None,
    rank: Optional[int] = None,
    extra_apis: Optional[bool] = None,
) -> None:
    """Install the tool's wrappers on the torch APIs.

    Args:
        model: the model. The wrappers are global; the model's own references to wrapped torch functions,
            taken when it was built (``self.act = nn.functional.gelu``), are replaced by the wrappers so
            those calls are recorded too (doc/dump_guide.md, "Which APIs are wrapped").
        hook: :data:`acc_cmp_dump` (dump for comparison) or :data:`overflow_check`.
        overflow_nums: overflow_check only: stop training at the N-th overflow; -1 never stops.
            Default None, meaning 1.
        dump_mode: ``"api"`` (default) or ``"acl"`` (operator-level dump of one API, NPU only).
        dump_config: the ACL ``dump.json``; required when ``dump_mode="acl"``. Default None.
        rank: the rank directory to write to. Default None: ``torch.distributed`` rank, else the
            RANK/LOCAL_RANK environment variables, else the device index of the first tensor seen, else 0.
        extra_apis: which torch APIs are wrapped (once per process; a later call changes it).
            None (default): keep the list already installed, at first the original ptdbg_ascend
            4.0's list (``dump/wrapped_apis.txt``), so the dump has the records the original's dump
            of the same run has. True: also wrap this tool's extra APIs (``dump/wrapped_apis_extra.txt``:
            casts and copies such as ``Tensor.to``/``float``/``clone``, views, ``*_like``, RNN cells...).
            False: back to the original's list.
    """
    _record_call("register_hook", locals())  # for compat.export_config; never raises
    if hook is overflow_check:
        from ptdbg_ascend import legacy_dump as api
        from ptdbg_ascend.overflow import api as overflow_api

        overflow_api.register_overflow_check(
            model, overflow_nums=overflow_nums, dump_mode=dump_mode, dump_config=dump_config, rank=rank,
            extra_apis=extra_apis, default_dump_path=lambda tag: api.set_dump_path(None, tag),
        )
    elif hook is acc_cmp_dump:
        from ptdbg_ascend import legacy_dump as api

        api.register_dump(model, overflow_nums=overflow_nums, dump_mode=dump_mode, dump_config=dump_config, rank=rank,
                          extra_apis=extra_apis)
    else:
        raise ParameterError("hook", hook, "must be acc_cmp_dump or overflow_check (both come with `from ptdbg_ascend import *`)")


def set_dump_switch(
    switch: str,
    mode: str = "all",
    scope: Optional[Sequence[str]] = None,
    api_list: Optional[Sequence[str]] = None,
    filter_switch: str = "ON",
    dump_mode: Union[str, Sequence[str], None] = None,
    summary_only: bool = False,
) -> None:
    """Open ("ON") or close ("OFF") a dump window.

    Args:
        switch: "ON" or "OFF".
        mode: "all" (default), "api_stack", "list", "range", "stack", "api_list" or "acl".
        scope: API names for list/range/stack/acl, e.g. ``["Tensor_permute_1_forward"]``. Default None.
        api_list: API names for api_list mode, e.g. ``["relu"]``. Default None.
        filter_switch: "ON" (default) drops bool/int tensors, 0-d and empty tensors and Python
            scalars; "OFF" keeps them.
        dump_mode: "all" (default), "forward", "backward", or a list from
            {all, forward, backward, input, output}.
        summary_only: True writes statistics to the pkl without npy files. Default False.
    """
    _record_call("set_dump_switch", locals())  # for compat.export_config; never raises
    from ptdbg_ascend import legacy_dump as api

    api.set_dump_switch(
        switch, mode=mode, scope=scope, api_list=api_list, filter_switch=filter_switch,
        dump_mode=dump_mode, summary_only=summary_only,
    )


def set_overflow_check_switch(switch: str, filter_switch: str = "ON") -> None:
    """Limit overflow checking to a window. Without any call, the whole run is checked.

    Args:
        switch: "ON" or "OFF".
        filter_switch: "ON" (default) or "OFF", as in :func:`set_dump_switch`.
    """
    _record_call("set_overflow_check_switch", locals())  # for compat.export_config; never raises
    from ptdbg_ascend.overflow import api as overflow_api

    overflow_api.set_overflow_check_switch(switch, filter_switch=filter_switch)


def set_backward_input(backward_input: List[str]) -> None:
    """For an ACL dump of a backward API: the ``.npy`` files of its incoming gradients
    (``..._backward_input.{i}.npy`` from an earlier dump), one per name in the acl scope."""
    _record_call("set_backward_input", locals())  # for compat.export_config; never raises
    from ptdbg_ascend.acl import api as acl_api

    acl_api.set_backward_input(backward_input)


def compare(
    input_param: Dict[str, Any],
    output_path: str,
    stack_mode: bool = False,
    auto_analyze: bool = True,
    suffix: str = "",
    fuzzy_match: bool = False,
    **options: Any,
) -> Any:
    """Compare two dumps API by API and write ``compare_result_{suffix}_{timestamp}.csv`` (+ xlsx, advisor).

    See :func:`ptdbg_ascend.comparison.api.compare` for the accepted ``input_param`` keys and the
    further keyword options (``xlsx``, ``api_mapping``). Returns its ``CompareOutcome``
    (``bool(outcome)``: every compared tensor reached the accuracy and enough could be compared).
    """
    from ptdbg_ascend.comparison import api as comparison_api

    return comparison_api.compare(
        input_param, output_path, stack_mode=stack_mode, auto_analyze=auto_analyze, suffix=suffix,
        fuzzy_match=fuzzy_match, **options,
    )


def compare_distributed(npu_dump_dir: str, bench_dump_dir: str, output_path: str, **kwargs: Any) -> Any:
    """Compare every rank of two multi-rank dumps (tag directories such as ``npu/ptdbg_dump_v1.0``).

    Accepts every keyword argument of :func:`compare` but ``suffix``; pairs rank directories by number and
    returns one ``CompareOutcome`` per rank pair (a list whose ``npu_only``/``bench_only`` name the ranks
    present on one side only).
    """
    from ptdbg_ascend.comparison import api as comparison_api

    return comparison_api.compare_distributed(npu_dump_dir, bench_dump_dir, output_path, **kwargs)


def parse(pkl_file: str, module_name_prefix: str) -> None:
    """Print the stack and statistics of the calls in ``pkl_file`` named by ``module_name_prefix``."""
    from ptdbg_ascend.comparison import parse_call

    parse_call.parse(pkl_file, module_name_prefix)
