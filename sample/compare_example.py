"""The compare script a user writes after dumping two runs (see sample/end_to_end.py for the dumps).

    python sample/compare_example.py NPU_TAG_DIR BENCH_TAG_DIR OUTPUT_DIR [CALL_NAME]

e.g., after ``bash sample/run_sample.sh``::

    python sample/compare_example.py sample/out/end_to_end/npu/ptdbg_dump_v1.0 \
        sample/out/end_to_end/gpu/ptdbg_dump_v1.0 sample/out/compare_example Functional_linear_1_forward

or, after the README's two dump runs, ``python sample/compare_example.py npu/ptdbg_dump_v1.0
gpu/ptdbg_dump_v1.0 ./output``. A tag directory is the ``{dump_tag}_v1.0`` folder holding ``rank0/``,
``rank1/``... Compares rank 0 with ``compare`` (stack column on), then every rank with
``compare_distributed``, then prints one call with ``parse``. Imports neither torch nor pandas.
"""

from __future__ import annotations

import glob
import os
import sys

from ptdbg_ascend import compare, compare_distributed, parse


def rank0_files(tag_dir: str):
    """The rank 0 pkl of a tag directory and its npy directory; exits with a message naming the directory."""
    pkls = sorted(glob.glob(os.path.join(tag_dir, "rank0", "*.pkl")))
    if not pkls:
        sys.exit("compare_example.py: no {} (is {!r} a dump's tag directory, the folder holding rank0/? "
                 "See the README's dump runs, or run bash sample/run_sample.sh first)".format(
                     os.path.join(tag_dir, "rank0", "*.pkl"), tag_dir))
    return pkls[0], pkls[0][:-len(".pkl")]


def main(argv) -> None:
    npu_tag, bench_tag, output = argv[1:4]
    os.makedirs(output, exist_ok=True)
    npu_pkl, npu_data = rank0_files(npu_tag)
    bench_pkl, bench_data = rank0_files(bench_tag)
    dump_result_param = {
        "npu_pkl_path": npu_pkl,
        "bench_pkl_path": bench_pkl,
        "npu_dump_data_dir": npu_data,
        "bench_dump_data_dir": bench_data,
        "is_print_compare_log": False,
    }
    compare(dump_result_param, output, stack_mode=True, suffix="rank0")
    compare_distributed(npu_tag, bench_tag, output, stack_mode=True, is_print_compare_log=False)
    if len(argv) > 4:
        parse(npu_pkl, argv[4])
    print("Results in", output, ":", sorted(os.listdir(output)))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv)
