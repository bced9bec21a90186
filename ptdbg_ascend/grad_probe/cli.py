"""``ptdbg grad-compare``: grad_probe's compare from the command line (``comparator.GradComparator``)."""

from __future__ import annotations

import argparse
import os

from ptdbg_ascend.grad_probe.comparator import DEFAULT_DROP, DEFAULT_SIMILARITY, GradComparator


def _share(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a share between 0 and 1")
    return number


def _grad_compare(args: argparse.Namespace) -> int:
    ranked = any(name.startswith("rank") and os.path.isdir(os.path.join(args.npu_path, name))
                 for name in os.listdir(args.npu_path)) if os.path.isdir(args.npu_path) else False
    if ranked:
        results = GradComparator.compare_distributed(args.npu_path, args.bench_path, args.output_path,
                                                     args.similarity, args.drop)
        answers = list(results.values())
    else:
        answers = [GradComparator.compare(args.npu_path, args.bench_path, args.output_path, args.similarity,
                                          args.drop)]
    # (each rank's answer is said by the comparator as it finishes: not printed twice)
    return 1 if any(result.first_step is not None for result in answers) else 0


def add_commands(subparsers) -> None:
    """Register ``grad-compare``."""
    command = subparsers.add_parser(
        "grad-compare", aliases=["grad_compare"],
        help="grad_probe: the share of gradient signs two runs agree on, per step and parameter",
        description="GradComparator.compare_distributed(npu_path, bench_path, output_path): for every rank{N} both "
                    "grad_probe dump paths hold (or two rank directories), similarities.csv and "
                    "similarities_picture/ per rank, and the first step whose similarity is below --similarity at "
                    "the first step or drops by more than --drop, with the parameters that drop first. Exit status: "
                    "0 no step diverges, 1 a step does, 2 a usage or input error.")
    command.add_argument("npu_path", help="a grad_probe dump_path (or one of its rank{N} directories)")
    command.add_argument("bench_path", help="the other run's")
    command.add_argument("-o", "--output_path", "--output-path", dest="output_path", required=True,
                         help="where the results go (created)")
    command.add_argument("--similarity", type=_share, default=DEFAULT_SIMILARITY,
                         help=f"the lowest similarity allowed at the first step (default {DEFAULT_SIMILARITY})")
    command.add_argument("--drop", type=_share, default=DEFAULT_DROP,
                         help=f"the largest drop allowed from one step to the next (default {DEFAULT_DROP})")
    command.set_defaults(handler=_grad_compare)
