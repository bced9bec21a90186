"""``ptdbg compare``, ``ptdbg compare-distributed`` and ``ptdbg parse`` (same names and defaults as the
Python API)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ptdbg_ascend.terminal import printable


def _compare(args: argparse.Namespace) -> int:
    from ptdbg_ascend.comparison.api import compare

    param = {"npu_pkl_path": args.npu_pkl_path, "bench_pkl_path": args.bench_pkl_path,
             "npu_dump_data_dir": args.npu_dump_data_dir, "bench_dump_data_dir": args.bench_dump_data_dir,
             "stack_path": args.stack_path, "is_print_compare_log": args.is_print_compare_log}
    outcome = compare(param, args.output_path, stack_mode=args.stack_mode, auto_analyze=args.auto_analyze,
                      suffix=args.suffix, fuzzy_match=args.fuzzy_match, api_mapping=args.api_mapping)
    return exit_status([outcome])


def exit_status(outcomes: Sequence) -> int:
    """0 every compared tensor reached the accuracy; 1 one did not; 2 too little could be compared to
    tell (said on stderr)."""
    if any(outcome.first_failure for outcome in outcomes):
        return 1
    short = [outcome for outcome in outcomes if not outcome]
    for outcome in short:
        print(printable("ptdbg compare: error: {}: {}".format(outcome.csv_path, outcome)), file=sys.stderr)
    return 2 if short else 0


def _compare_distributed(args: argparse.Namespace) -> int:
    from ptdbg_ascend.comparison.api import compare_distributed

    outcomes = compare_distributed(args.npu_dump_dir, args.bench_dump_dir, args.output_path,
                                   stack_mode=args.stack_mode, auto_analyze=args.auto_analyze,
                                   fuzzy_match=args.fuzzy_match, is_print_compare_log=args.is_print_compare_log)
    status = exit_status(outcomes)
    missing = outcomes.not_compared()
    if missing:  # a rank that was not compared cannot be said to agree: 2 unless a compared rank failed
        print(printable("ptdbg compare-distributed: {}".format(missing)), file=sys.stderr)
        return status or 2
    return status


def _parse(args: argparse.Namespace) -> int:
    from ptdbg_ascend.comparison.parsing import parse

    parse(args.pkl_file, args.module_name_prefix)
    return 0


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack-mode", dest="stack_mode", action="store_true",
                        help="add the NPU_Stack_Info column (stack_mode=True; default False)")
    parser.add_argument("--no-auto-analyze", dest="auto_analyze", action="store_false",
                        help="skip the advisor (auto_analyze=False; default: run it)")
    parser.add_argument("--fuzzy-match", dest="fuzzy_match", action="store_true",
                        help="pair calls ignoring the call counter (fuzzy_match=True; default False)")
    parser.add_argument("--quiet", dest="is_print_compare_log", action="store_false",
                        help="no per-row log lines (is_print_compare_log=False; default True)")


def add_commands(subparsers) -> None:
    """Register the compare-side sub-commands. Exit status: 0 all reached, 1 a failing API, 2 an error or
    too little compared to tell."""
    compare = subparsers.add_parser(
        "compare", help="compare two dumps API by API (compare())",
        description="compare(input_param, output_path, stack_mode=False, auto_analyze=True, suffix='', "
                    "fuzzy_match=False). Writes compare_result_{suffix}_{timestamp}.csv/.xlsx and advisor_*.txt "
                    "into OUTPUT_PATH. A dump is a legacy .pkl or an msprobe dump.json. Leave out both data "
                    "dirs for a statistics-only comparison. Exit status 1 when an API's accuracy is not reached, 2 "
                    "on an error or when too little could be compared to tell.")
    compare.add_argument("npu_pkl_path", help="NPU dump: api_stack_npu_dump.pkl or dump.json")
    compare.add_argument("bench_pkl_path", help="bench (GPU/CPU) dump: .pkl or dump.json")
    compare.add_argument("output_path", help="existing directory for the results")
    compare.add_argument("--npu-dump-data-dir", dest="npu_dump_data_dir", help="NPU npy directory")
    compare.add_argument("--bench-dump-data-dir", dest="bench_dump_data_dir", help="bench npy directory")
    compare.add_argument("--stack-path", dest="stack_path", help="NPU stack.json (dump.json input only)")
    compare.add_argument("--suffix", default="", help="inserted in the result file name (default '')")
    compare.add_argument("--api-mapping", dest="api_mapping", default=None,
                         help="JSON/YAML file of NPU API -> bench API names, e.g. "
                              "{\"NPU_npu_rms_norm\": \"Functional_rms_norm\"} (default: none)")
    _options(compare)
    compare.set_defaults(handler=_compare)

    distributed = subparsers.add_parser(
        "compare-distributed", help="compare every rank of two dumps (compare_distributed())",
        description="compare_distributed(npu_dump_dir, bench_dump_dir, output_path, **kwargs): pairs rank{N} "
                    "directories by rank number and writes compare_result_rank{n}-rank{n}_{timestamp}.csv each. "
                    "Exit status as compare; 2 also when a rank is present on one side only (named on stderr) "
                    "and no compared rank failed.")
    distributed.add_argument("npu_dump_dir", help="NPU tag directory, e.g. npu/ptdbg_dump_v1.0")
    distributed.add_argument("bench_dump_dir", help="bench tag directory, e.g. gpu/ptdbg_dump_v1.0")
    distributed.add_argument("output_path", help="existing directory for the results")
    _options(distributed)
    distributed.set_defaults(handler=_compare_distributed)

    parse = subparsers.add_parser(
        "parse", help="print one call's stack and statistics (parse())",
        description="parse(pkl_file, module_name_prefix): prints the stack (outermost first) and the statistics "
                    "of the call, e.g. Torch_batch_norm_0_forward.")
    parse.add_argument("pkl_file", help="a dump .pkl (or dump.json)")
    parse.add_argument("module_name_prefix", help="call name, e.g. Torch_batch_norm_0_forward")
    parse.set_defaults(handler=_parse)
