"""``compare`` and ``compare_distributed``: the public entry points of the compare side.

Imports neither torch nor pandas: reading npy needs numpy only (torch is imported lazily for ``.pt`` and for
the advisor's re-run of a failing compare's suspect, ``rerun.py``).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

from ptdbg_ascend.comparison.distributed import compare_distributed
from ptdbg_ascend.comparison.inputs import check_options, parse_input_param
from ptdbg_ascend.comparison.outcome import CompareOutcome, Counts
from ptdbg_ascend.formats.finding import Finding
from ptdbg_ascend.comparison.run import compare_dumps

__all__ = ["compare", "compare_distributed", "CompareOutcome", "Counts", "Finding"]


def compare(input_param: Dict[str, Any], output_path: str, stack_mode: bool = False, auto_analyze: bool = True,
            suffix: str = "", fuzzy_match: bool = False, xlsx: bool = True,
            api_mapping: Optional[Union[Mapping[str, str], str]] = None, html: bool = True,
            rerun: bool = True) -> CompareOutcome:
    """Compare two dumps API by API.

    ``input_param`` keys: ``npu_pkl_path``, ``bench_pkl_path`` (required; msprobe's ``npu_path``/``bench_path``
    or ``npu_json_path``/``bench_json_path`` dump.json files are accepted too, and may be mixed with a pkl),
    ``npu_dump_data_dir``, ``bench_dump_data_dir`` (default: absent = statistics-only comparison; for a
    dump.json, its ``dump_tensor_data`` directory when present), ``stack_path``/``stack_json_path``
    (dump.json only; default: the ``stack.json`` beside the NPU dump.json when there is one),
    ``is_print_compare_log`` (default True).
    ``output_path``: a directory, created with its parents when absent; writes
    ``compare_result_{suffix}_{timestamp}.csv`` (``suffix`` default "" drops the part) and the same-named
    ``.xlsx`` (``xlsx=True``; needs openpyxl), with ``auto_analyze`` (default True)
    ``advisor[_{suffix}]_{timestamp}.txt``, and with ``html`` (default True) ``compare_report_{tail}.html``,
    the run as one self-contained page (:mod:`ptdbg_ascend.comparison.html_report`); when such a report exists
    already (two compares in one second), ``_1``, ``_2``... is added to the tail of all of them (never replacing
    a report).
    ``stack_mode`` (default False) adds the ``NPU_Stack_Info`` column. Calls are always aligned across
    counter shifts (by API name and call structure); ``fuzzy_match`` (default False) changes no pairing: it
    warns once and marks rows whose two call names differ in Err_message.
    ``api_mapping`` (default None): NPU API -> bench API names without counter and direction
    (``{"NPU_npu_rms_norm": "Functional_rms_norm"}``), as a dict or the path of a JSON/YAML file.
    ``rerun`` (default True; needs ``auto_analyze``): re-run the advisor's suspect on this machine from the NPU's
    own dumped inputs, in float64, within the pre-check's allowlist and memory budget and a 30 s bound, and say
    whether its output is further from that than its dtype allows (``Re-run:`` in the advisor file,
    ``outcome.finding.rerun``; :mod:`ptdbg_ascend.comparison.rerun`).

    Returns a :class:`CompareOutcome`: ``bool(outcome)`` is True when no compared tensor failed the
    robust verdict and enough tensors could be compared. A dump whose rank directory still holds the
    writer's lock (still being written, or killed) is compared as far as it got, with a warning; see
    ``outcome.torn`` (:mod:`ptdbg_ascend.readers.dump_state`).
    """
    options = check_options(output_path, stack_mode=stack_mode, auto_analyze=auto_analyze, suffix=suffix,
                            fuzzy_match=fuzzy_match, xlsx=xlsx, api_mapping=api_mapping, html=html,
                            rerun=rerun)
    return compare_dumps(parse_input_param(input_param), options)
