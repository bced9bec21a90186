"""``ptdbg run-ut`` and ``ptdbg api-precision-compare``, with msprobe 1.0.4's flag spellings
(``msprobe -f pytorch run_ut -api_info ... -o ...``) and their long forms.

Exit status (the one error boundary is ``ptdbg_ascend/cli.py``): 0 no API is an error (warnings alone
included), 1 at least one API's accuracy is an error (run-ut) / an API is judged error against the GPU
(api-precision-compare), 2 a usage or input error (one line on stderr, nothing half-written), 130 Ctrl-C
(one line on stderr naming the ``-csv_path`` that resumes the run).
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from ptdbg_ascend.precheck import columns as col


def _device(value: Optional[str]) -> str:
    """msprobe's ``-d 0`` is a device id: the accelerator present here with that index, else an error
    (no silent CPU fallback); a device name passes through to run_ut's check."""
    if value is None:
        return "cpu"
    if str(value).isdigit():
        from ptdbg_ascend.device import torch_npu_module
        from ptdbg_ascend.errors import ParameterError

        if torch_npu_module() is not None:
            return "npu:" + value
        import torch

        if torch.cuda.is_available():
            return "cuda:" + value
        raise ParameterError("-d/--device", value, "a device id needs an NPU or a GPU on this machine; use "
                                                   "\"cpu\" (the default) here")
    return value


def _run_ut(args: argparse.Namespace) -> int:
    from ptdbg_ascend.precheck.run_ut import run_ut

    outcome = run_ut(args.api_info_file, device=_device(args.device), **_run_ut_options(args))
    print(outcome.summary())
    return 1 if outcome.failed else 0


def _multi_run_ut(args: argparse.Namespace) -> int:
    from ptdbg_ascend.precheck.multi_run_ut import multi_run_ut

    devices = [_device(value) for value in (args.device or [None])]
    outcome = multi_run_ut(args.api_info_file, n=args.num_splits, devices=devices, preload=args.preload or (),
                           start_method=args.start_method, threads_per_worker=args.threads_per_worker,
                           cluster_timeout=args.cluster_timeout, **_run_ut_options(args))
    print(outcome.summary())
    return 1 if outcome.failed else 0


def _run_ut_options(args: argparse.Namespace) -> dict:
    """The keyword arguments run_ut and multi_run_ut share, from the flags (and -config's run_ut section)."""
    from ptdbg_ascend.log import logger

    white_list: List[str] = list(args.white_list or [])
    black_list: List[str] = list(args.black_list or [])
    error_data_path: Optional[str] = args.error_data_path
    if args.config_path:
        from ptdbg_ascend.config import load_config

        config = load_config(args.config_path, task="run_ut")
        white_list = white_list or list(config.white_list)
        black_list = black_list or list(config.black_list)
        error_data_path = error_data_path or config.error_data_path
    if args.jit_compile:
        logger.warning("-j/--jit_compile only applies to an NPU run; it has no effect here.")
    return dict(out_path=args.out_path or ".", save_error_data=args.save_error_data, filter_same=args.filter_api,
                result_csv_path=args.result_csv_path or None, white_list=white_list, black_list=black_list,
                error_data_path=error_data_path, random_data=args.random_data, seed=args.seed,
                progress=not args.no_progress, dumped_outputs=args.dumped_outputs, compare_csv=args.compare_csv,
                memory_budget=args.memory_budget, data_dir=args.data_dir)


def _api_precision_compare(args: argparse.Namespace) -> int:
    import csv

    from ptdbg_ascend.csv_cells import restore_dict
    from ptdbg_ascend.precheck.device_compare import api_precision_compare
    from ptdbg_ascend.terminal import printable

    result, details = api_precision_compare(args.npu_csv_path, args.gpu_csv_path, args.out_path or ".")
    print(f"api_precision_compare: result  {printable(result)}\n                       details {printable(details)}")
    with open(result, encoding="utf-8-sig", newline="") as handle:
        rows = [restore_dict(row) for row in csv.DictReader(handle)]
    failing = [row for row in rows if "error" in (row.get(col.FORWARD_SUCCESS), row.get(col.BACKWARD_SUCCESS))]
    for row in failing[:15]:
        print(f"  error  {printable(row.get(col.API_NAME))}")  # API names from the CSVs
    return 1 if failing else 0


def _add_run_ut_arguments(parser: argparse.ArgumentParser, device_nargs: Optional[str] = None) -> None:
    """The flags of run-ut, shared by multi-run-ut (whose -d takes a list: msprobe's ``-d 0 1``)."""
    parser.add_argument("-api_info", "--api_info_file", dest="api_info_file", required=True,
                        help="the dump.json (dump_path/step0/rank/dump.json; rank0, rank1... under "
                             "torch.distributed)")
    parser.add_argument("-o", "--out_path", dest="out_path", default="",
                        help="directory for the CSVs, created if absent (default: the current directory)")
    parser.add_argument("-save_error_data", "--save_error_data", dest="save_error_data", action="store_true",
                        help="write inputs/outputs of APIs judged error or warning as .pt under "
                             "ERROR_DATA_PATH/ut_error_data{ts}/")
    parser.add_argument("-csv_path", "--result_csv_path", dest="result_csv_path", default="",
                        help="resume an interrupted run: its accuracy_checking_result_{ts}.csv")
    parser.add_argument("-f", "--filter_api", dest="filter_api", action="store_true",
                        help="skip calls identical to an earlier one in everything but Max/Min")
    parser.add_argument("-white_list", "--white_list", dest="white_list", nargs="+", default=None, metavar="API",
                        help="check only these APIs (names of the wrap list: conv2d or Functional.conv2d)")
    parser.add_argument("-black_list", "--black_list", dest="black_list", nargs="+", default=None, metavar="API",
                        help="never check these APIs (wins over the white list)")
    parser.add_argument("-error_data_path", "--error_data_path", dest="error_data_path", default=None,
                        help="existing directory for -save_error_data (default: the output directory)")
    parser.add_argument("-config", "--config_path", dest="config_path", default="",
                        help="a config.json whose run_ut section gives white_list, black_list, error_data_path "
                             "(the flags win)")
    parser.add_argument("-d", "--device", dest="device", default=None, nargs=device_nargs,
                        help="where the dumped-dtype run happens: cpu (default), cuda:0..., or msprobe's device id "
                             "(needs an NPU/GPU here)")
    parser.add_argument("-j", "--jit_compile", dest="jit_compile", action="store_true",
                        help="msprobe's NPU jit-compile switch; no effect without an NPU")
    parser.add_argument("--random-data", "--random_data", dest="random_data", action="store_const", const=True,
                        default=None, help="run on random inputs within the recorded Max/Min even if tensors were "
                                           "dumped (default: only for a statistics dump)")
    parser.add_argument("--dumped-outputs", "--dumped_outputs", dest="dumped_outputs", action="store_true",
                        help="judge the outputs held in the dump (e.g. an NPU dump on a machine without an NPU) "
                             "against the float64 benchmark instead of re-running in the dumped dtypes")
    parser.add_argument("--compare", "--compare_csv", dest="compare_csv", default=None, metavar="COMPARE_CSV",
                        help="the compare_result_{ts}.csv of the same run (NPU side = this dump): link each failing "
                             "API to it (failing / passing / absent there, and its place relative to the advisor's "
                             "suspect)")
    parser.add_argument("--memory-budget", "--memory_budget", dest="memory_budget", default=None, metavar="SIZE",
                        help="memory one API call may take (inputs, their float64 and dtype copies, outputs), e.g. "
                             "8G or 512M; a call over it is a SKIP row (default: a quarter of the memory available, "
                             "shared by the workers)")
    parser.add_argument("--data-dir", "--data_dir", dest="data_dir", default=None,
                        help="directory of the dump's tensor files (default: dump_tensor_data/ beside the dump.json; "
                             "the directory recorded inside the dump is never used)")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the runs and of random data (default 1234)")
    parser.add_argument("--no-progress", dest="no_progress", action="store_true", help="no progress bar")


def add_commands(subparsers) -> None:
    """Register ``run-ut``, ``multi-run-ut`` and ``api-precision-compare``."""
    run = subparsers.add_parser(
        "run-ut", aliases=["run_ut"],
        help="API pre-check: re-run every dumped API in float64 and in its dtype, judge it (run_ut())",
        description="run_ut(api_info, out_path, ...): rebuilds every API call of a PrecisionDebugger dump.json "
                    "(task tensor, level L1), runs it on the CPU in float64 (benchmark) and in the dumped dtypes, "
                    "forward and backward, and writes accuracy_checking_result_{ts}.csv and "
                    "accuracy_checking_details_{ts}.csv. A statistics dump runs on random inputs. Exit status: 0 no "
                    "API is an error, 1 an API is an error, 2 a usage or input error.")
    _add_run_ut_arguments(run)
    run.set_defaults(handler=_run_ut)

    multi = subparsers.add_parser(
        "multi-run-ut", aliases=["multi_run_ut"],
        help="run-ut on N worker processes (and across machines under torchrun); resumable",
        description="multi_run_ut(api_info, n, out_path, ...): run-ut with N worker processes, each loading only "
                    "the tensors of the API it runs; the CSVs are those run-ut writes (same rows, dump order). A "
                    "worker that dies loses only its API in flight (retried once, then an error row). Under "
                    "torchrun (RANK/WORLD_SIZE set) every rank runs its share and rank 0 writes the CSVs. "
                    "-csv_path resumes. Exit status as run-ut.")
    _add_run_ut_arguments(multi, device_nargs="+")
    multi.add_argument("-n", "--num_splits", dest="num_splits", type=int, default=8,
                       metavar="N", help="worker processes (per rank under torchrun), 1..64 (default 8)")
    multi.add_argument("--preload", dest="preload", nargs="+", default=None, metavar="MODULE",
                       help="modules every worker imports first (custom ops, patches active in the dumped run)")
    multi.add_argument("--start-method", "--start_method", dest="start_method", default="forkserver",
                       choices=("forkserver", "spawn"), help="how workers start (default forkserver; never fork)")
    multi.add_argument("--threads-per-worker", "--threads_per_worker", dest="threads_per_worker", type=int,
                       default=None, help="torch intra-op threads per worker (default: run-ut's, which keeps the "
                                          "CSVs identical to run-ut's; 1 avoids oversubscribing the cores)")
    multi.add_argument("--cluster-timeout", "--cluster_timeout", dest="cluster_timeout", type=float, default=300.0,
                       metavar="SECONDS", help="under torchrun (RANK/WORLD_SIZE set): give up when the other ranks "
                                               "have not all joined within SECONDS (default 300)")
    multi.set_defaults(handler=_multi_run_ut)

    compare = subparsers.add_parser(
        "api-precision-compare", aliases=["api_precision_compare"],
        help="NPU pre-check details against GPU details (api_precision_compare())",
        description="api_precision_compare(npu_csv, gpu_csv, out_path): judges each NPU output against the GPU's "
                    "error w.r.t. the same CPU benchmark; writes api_precision_compare_result_{ts}.csv and "
                    "api_precision_compare_details_{ts}.csv. Exit status 1 when an API is an error.")
    compare.add_argument("-npu", "--npu_csv_path", dest="npu_csv_path", required=True,
                         help="accuracy_checking_details_{ts}.csv of the NPU run")
    compare.add_argument("-gpu", "--gpu_csv_path", dest="gpu_csv_path", required=True,
                         help="accuracy_checking_details_{ts}.csv of the GPU run")
    compare.add_argument("-o", "--out_path", dest="out_path", default="",
                         help="directory for the results (default: the current directory)")
    compare.set_defaults(handler=_api_precision_compare)
