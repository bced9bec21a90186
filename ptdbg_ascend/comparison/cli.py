"""``ptdbg compare``, ``ptdbg compare-distributed`` and ``ptdbg parse`` (same names and defaults as the
Python API)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ptdbg_ascend.terminal import printable


def _compare(args: argparse.Namespace) -> int:
    from ptdbg_ascend.comparison.api import compare

    if args.input_path is not None:
        return _compare_json(args)
    if args.npu_pkl_path is None or args.bench_pkl_path is None:  # argparse's usage error, exit status 2
        args.usage_error("the following arguments are required: NPU_DUMP BENCH_DUMP OUTPUT_PATH (or msprobe's -i "
                         "COMPARE_JSON -o OUTPUT_PATH)")
    output_path = _output_path(args, args.output_path)
    param = {"npu_pkl_path": args.npu_pkl_path, "bench_pkl_path": args.bench_pkl_path,
             "npu_dump_data_dir": args.npu_dump_data_dir, "bench_dump_data_dir": args.bench_dump_data_dir,
             "stack_path": args.stack_path, "is_print_compare_log": args.is_print_compare_log}
    outcome = compare(param, output_path, stack_mode=args.stack_mode, auto_analyze=args.auto_analyze,
                      suffix=args.suffix, fuzzy_match=args.fuzzy_match, xlsx=args.xlsx, html=args.html,
                      api_mapping=args.api_mapping, rerun=args.rerun)
    return exit_status([outcome])


def _output_path(args: argparse.Namespace, positional: Optional[str]) -> str:
    """The output directory: the positional OUTPUT_PATH or msprobe's -o, exactly one of them."""
    from ptdbg_ascend.errors import ParameterError

    if positional is not None and args.output_option is not None:
        raise ParameterError("-o/--output_path", args.output_option, "give the output directory once: either as "
                             "the last positional argument ({}) or with -o".format(positional))
    chosen = positional if positional is not None else args.output_option
    if chosen is None:
        raise ParameterError("OUTPUT_PATH", None, "required: the directory for the results (created if absent)")
    return chosen


def _compare_json(args: argparse.Namespace) -> int:
    """msprobe's ``compare -i compare.json -o OUT``: two dump files, or two step directories (every rank)."""
    from ptdbg_ascend.comparison.api import compare, compare_distributed
    from ptdbg_ascend.comparison.compare_json import read_compare_json
    from ptdbg_ascend.errors import ParameterError

    # -i holds every input: the positional dumps and the per-file options would compete with it.
    positional = [value for value in (args.npu_pkl_path, args.bench_pkl_path, args.output_path) if value is not None]
    if positional:
        raise ParameterError("-i/--input_path", args.input_path, "names the dumps in its file: give no positional "
                             "argument (got {}) and the output directory with -o".format(", ".join(positional)))
    given = [flag for flag, value in (("--npu-dump-data-dir", args.npu_dump_data_dir),
                                      ("--bench-dump-data-dir", args.bench_dump_data_dir),
                                      ("--stack-path", args.stack_path)) if value is not None]
    if given:
        raise ParameterError("-i/--input_path", args.input_path, "names the inputs in its file; leave out {} (a "
                             "stack.json goes in its stack_path)".format(", ".join(given)))
    output_path = _output_path(args, None)
    spec = read_compare_json(args.input_path)
    print_log = spec.print_log and args.is_print_compare_log  # --quiet wins over the file
    if spec.distributed:
        if args.suffix:
            raise ParameterError("--suffix", args.suffix, "not used with step directories (the rank pair is the "
                                 "suffix)")
        outcomes = compare_distributed(spec.npu_path, spec.bench_path, output_path, stack_mode=args.stack_mode,
                                       auto_analyze=args.auto_analyze, fuzzy_match=args.fuzzy_match,
                                       is_print_compare_log=print_log, xlsx=args.xlsx, html=args.html,
                                       api_mapping=args.api_mapping, rerun=args.rerun)
        return _distributed_status(outcomes)
    param = dict(spec.input_param(), is_print_compare_log=print_log)
    outcome = compare(param, output_path, stack_mode=args.stack_mode, auto_analyze=args.auto_analyze,
                      suffix=args.suffix, fuzzy_match=args.fuzzy_match, xlsx=args.xlsx, html=args.html,
                      api_mapping=args.api_mapping, rerun=args.rerun)
    return exit_status([outcome])


# The exit statuses of ptdbg compare / compare-distributed (the CLI's errors are 2: usage, a bad file).
PASSED, FAILED, INCOMPLETE = 0, 1, 3


def exit_status(outcomes: Sequence) -> int:
    """0 (``PASSED``) every compared tensor reached the accuracy and the run was compared; 1 (``FAILED``) a
    compared tensor did not; 3 (``INCOMPLETE``) nothing failed but part of the run was not compared (too few
    tensors judged, a direction missing on one side, NPU rows without a partner: said on stderr)."""
    if any(outcome.first_failure for outcome in outcomes):
        return FAILED
    short = [outcome for outcome in outcomes if not outcome]
    for outcome in short:
        print(printable(f"ptdbg compare: incomplete: {outcome.csv_path}: {outcome}"), file=sys.stderr)
    return INCOMPLETE if short else PASSED


def _results_status(results: Sequence) -> int:
    """:func:`exit_status` of every rank pair's PairResult (compared here, resumed, or on another process)."""
    if any(result.first_failure for result in results):
        return FAILED
    short = [result for result in results if not result.passed]
    for result in short:
        print(printable("ptdbg compare: incomplete: {}: {}".format(result.csv_path, result.coverage or "not passed")),
              file=sys.stderr)
    return INCOMPLETE if short else PASSED


def _compare_distributed(args: argparse.Namespace) -> int:
    from ptdbg_ascend.comparison.api import compare_distributed

    outcomes = compare_distributed(args.npu_dump_dir, args.bench_dump_dir, args.output_path, workers=args.workers,
                                   resume=args.resume, peer_timeout=args.peer_timeout,
                                   stack_mode=args.stack_mode, auto_analyze=args.auto_analyze,
                                   fuzzy_match=args.fuzzy_match, is_print_compare_log=args.is_print_compare_log,
                                   xlsx=args.xlsx, html=args.html, rerun=args.rerun)
    if outcomes.summary_path is None:  # a torchrun process other than rank 0: rank 0 answers for the launch
        return PASSED
    return _distributed_status(outcomes)


def _whole_number(text: str):
    """``--workers`` / ``--peer-timeout`` as a number when it reads as one, else the text (refused by the API's
    check with a ParameterError naming the parameter)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _distributed_status(outcomes) -> int:
    status = _results_status(outcomes.results) if outcomes.results else exit_status(outcomes)
    missing = outcomes.not_compared()
    if missing:  # a rank that was not compared cannot be said to agree: incomplete unless a compared rank failed
        print(printable(f"ptdbg compare-distributed: {missing}"), file=sys.stderr)
        return status or INCOMPLETE
    return status


def _parse(args: argparse.Namespace) -> int:
    from ptdbg_ascend.comparison.parse_call import parse

    parse(args.pkl_file, args.module_name_prefix)
    return 0


def _options(parser: argparse.ArgumentParser) -> None:
    # Each flag also has msprobe 1.0.4's spelling (-s/--stack_mode, -c/--compare_only, -f/--fuzzy_match).
    parser.add_argument("--stack-mode", "-s", "--stack_mode", dest="stack_mode", action="store_true",
                        help="add the NPU_Stack_Info column (stack_mode=True; default False); a dump.json's stack.json "
                             "is the one beside it unless --stack-path names another")
    parser.add_argument("--no-auto-analyze", "-c", "--compare_only", dest="auto_analyze", action="store_false",
                        help="skip the advisor (auto_analyze=False; default: run it)")
    parser.add_argument("--fuzzy-match", "-f", "--fuzzy_match", dest="fuzzy_match", action="store_true",
                        help="changes no pairing (calls are always paired across counter shifts, by API name and "
                             "call structure); only warns once and marks each row whose two call names differ "
                             "with 'Fuzzy matching data, the comparison accuracy may be affected.' in Err_message "
                             "(fuzzy_match=True; default False)")
    parser.add_argument("--quiet", dest="is_print_compare_log", action="store_false",
                        help="no per-row log lines (is_print_compare_log=False; default True)")
    parser.add_argument("--no-xlsx", dest="xlsx", action="store_false",
                        help="write the CSV only, no .xlsx (xlsx=False; default: both; the .xlsx needs openpyxl)")
    parser.add_argument("--no-html", dest="html", action="store_false",
                        help="no compare_report_*.html (html=False; default: write it beside the CSV; for "
                             "compare-distributed also no compare_index_*.html)")
    parser.add_argument("--no-rerun", dest="rerun", action="store_false",
                        help="do not re-run the advisor's suspect from the NPU's own dumped inputs (rerun=False; "
                             "default: re-run it in float64 on this machine, at most 30 s, and print 'Re-run:')")


def add_commands(subparsers) -> None:
    """Register the compare-side sub-commands. Exit status: 0 all reached, 1 a failing API, 2 an error, 3
    incomplete (nothing failed, but part of the run was not compared)."""
    compare = subparsers.add_parser(
        "compare", help="compare two dumps API by API (compare())",
        description="compare(input_param, output_path, stack_mode=False, auto_analyze=True, suffix='', "
                    "fuzzy_match=False). Also msprobe's form: ptdbg [-f pytorch] compare -i compare.json -o OUT "
                    "[-s] [-c] [-f]. Writes compare_result_{suffix}_{timestamp}.csv/.xlsx, advisor_*.txt and "
                    "compare_report_*.html into OUTPUT_PATH. A dump is a legacy .pkl or an msprobe dump.json. "
                    "Leave out both data dirs for a statistics-only comparison. Exit status 0 when every compared "
                    "tensor is within what its precision explains and the run was compared, 1 when an API's accuracy is not reached, 2 "
                    "on an error, 3 when nothing failed but part of the run was not compared (too few tensors "
                    "judged, a direction missing on one side, NPU rows without a bench partner).")
    compare.add_argument("npu_pkl_path", nargs="?", metavar="NPU_DUMP",
                         help="NPU dump: api_stack_npu_dump.pkl or dump.json")
    compare.add_argument("bench_pkl_path", nargs="?", metavar="BENCH_DUMP",
                         help="bench (GPU/CPU) dump: .pkl or dump.json")
    compare.add_argument("output_path", nargs="?", metavar="OUTPUT_PATH",
                         help="directory for the results (created if absent)")
    compare.add_argument("-i", "--input_path", dest="input_path", default=None, metavar="COMPARE_JSON",
                         help="msprobe's compare.json instead of the two dumps: {\"npu_path\": ..., \"bench_path\": "
                              "..., \"stack_path\": ... (optional), \"is_print_compare_log\": true}; two dump.json "
                              "files, or two step directories (every rank pair is compared)")
    compare.add_argument("-o", "--output_path", dest="output_option", default=None, metavar="OUTPUT_PATH",
                         help="msprobe's spelling of OUTPUT_PATH")
    compare.add_argument("--npu-dump-data-dir", dest="npu_dump_data_dir", help="NPU npy directory")
    compare.add_argument("--bench-dump-data-dir", dest="bench_dump_data_dir", help="bench npy directory")
    compare.add_argument("--stack-path", dest="stack_path",
                         help="NPU stack.json (dump.json input only; default: the stack.json beside the NPU dump.json)")
    compare.add_argument("--suffix", default="", help="inserted in the result file name (default '')")
    compare.add_argument("--api-mapping", dest="api_mapping", default=None,
                         help="JSON/YAML file of NPU API -> bench API names, e.g. "
                              "{\"NPU_npu_rms_norm\": \"Functional_rms_norm\"} (default: none)")
    _options(compare)
    compare.set_defaults(handler=_compare, usage_error=compare.error)

    _add_distributed(subparsers)

    parse = subparsers.add_parser(
        "parse", help="print one call's stack and statistics (parse())",
        description="parse(pkl_file, module_name_prefix): prints the stack (outermost first) and the statistics "
                    "of the call, e.g. Torch_batch_norm_0_forward.")
    parse.add_argument("pkl_file", help="a dump .pkl (or dump.json)")
    parse.add_argument("module_name_prefix", help="call name, e.g. Torch_batch_norm_0_forward")
    parse.set_defaults(handler=_parse)


def _add_distributed(subparsers) -> None:
    distributed = subparsers.add_parser(
        "compare-distributed", help="compare every rank of two dumps (compare_distributed())",
        description="compare_distributed(npu_dump_dir, bench_dump_dir, output_path, **kwargs): pairs rank{N} "
                    "directories by rank number and writes compare_result_rank{n}-rank{n}_{timestamp}.csv each, "
                    "and compare_index_{timestamp}.html over the ranks' HTML reports. "
                    "Also compare_summary_{timestamp}.csv, a row per rank pair. Rank pairs are compared on "
                    "--workers processes; under torchrun (python -m ptdbg_ascend compare-distributed ...) shared "
                    "over the launch's processes, rank 0 writing the summary. A re-run skips the pairs already "
                    "compared (OUTPUT_PATH/.ptdbg_compare/). "
                    "Exit status as compare; 3 also when a rank is present on one side only or a pair could not be "
                    "compared (named on stderr) and no compared rank failed.")
    distributed.add_argument("npu_dump_dir", help="NPU tag directory, e.g. npu/ptdbg_dump_v1.0")
    distributed.add_argument("bench_dump_dir", help="bench tag directory, e.g. gpu/ptdbg_dump_v1.0")
    distributed.add_argument("output_path", help="directory for the results (created if absent)")
    distributed.add_argument("--workers", type=_whole_number, default=None, metavar="N",
                             help="processes comparing rank pairs, each one pair at a time (workers=; default: the "
                                  "cores, at most the pairs; under torchrun 1 per process; 1: in this process)")
    distributed.add_argument("--no-resume", dest="resume", action="store_false",
                             help="compare every pair again, even those whose completion record in "
                                  "OUTPUT_PATH/.ptdbg_compare/ is of the same inputs (resume=False; default: skip them)")
    distributed.add_argument("--peer-timeout", dest="peer_timeout", type=_whole_number, default=120.0,
                             metavar="SECONDS", help="under torchrun: seconds without a heartbeat before rank 0 takes "
                                                     "a process for dead and names its pairs lost (default 120)")
    _options(distributed)
    distributed.set_defaults(handler=_compare_distributed)
