"""Cost of ``jsonfile.load_json``'s checks on a large dump.json: noticing duplicate keys (its
``object_pairs_hook``) and reading numbers beyond float64's range as ``OutOfRange`` (``formats.json_numbers``'
``parse_int``/``parse_float``).

Writes a dump.json of realistic msprobe entries (a training step of conv/batch_norm/relu/linear calls,
forward and backward, tensor leaves with statistics and data names) to a temporary directory, then times,
alternating, ``json.load`` without a hook, ``json.loads`` with the duplicate hook alone, and ``load_json``
(both), best of N each, in CPU seconds of this process (a busy machine's other load does not count).

    python3 bench/bench_json_duplicates.py               # ~40 MB
    python3 bench/bench_json_duplicates.py --mb 200 -n 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ptdbg_ascend.jsonfile import _pairs_hook, load_json  # noqa: E402

APIS = ("Functional.conv2d", "Functional.batch_norm", "Functional.relu", "Tensor.__add__", "Functional.linear")


def leaf(name: str, index: int) -> dict:
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [32, 64, 28, 28], "Max": 3.1415926 + index,
            "Min": -2.718281828 - index, "Mean": 0.000123456789, "Norm": 1234.56789012, "requires_grad": True,
            "data_name": name + ".pt"}


def write_dump(path: str, megabytes: float) -> int:
    data = {}
    size, n = 0, 0
    while size < megabytes * 1e6:
        api = APIS[n % len(APIS)]
        for direction in ("forward", "backward"):
            call = f"{api}.{n // len(APIS)}.{direction}"
            entry = {"input_args": [leaf(call + f".input.{i}", i) for i in range(3)],
                     "input_kwargs": {"eps": {"type": "float", "value": 1e-05}, "training": {"type": "bool",
                                                                                             "value": True}},
                     "output": [leaf(call + ".output.0", 0)]}
            data[call] = entry
            size += len(json.dumps(entry)) + len(call) + 6
        n += 1
    with open(path, "w") as handle:
        json.dump({"task": "tensor", "level": "L1", "dump_data_dir": None, "data": data}, handle, indent=1)
    return len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=40.0, help="dump.json size in MB (default 40)")
    parser.add_argument("-n", type=int, default=5, help="timed loads of each kind (default 5)")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="bench_json_")
    try:
        path = os.path.join(directory, "dump.json")
        entries = write_dump(path, args.mb)
        plain, pairs, hooked = [], [], []
        for _ in range(args.n):
            started = time.process_time()
            with open(path, encoding="utf-8") as handle:
                json.load(handle)
            plain.append(time.process_time() - started)
            started = time.process_time()
            with open(path, encoding="utf-8") as handle:
                json.loads(handle.read(), object_pairs_hook=_pairs_hook([]))
            pairs.append(time.process_time() - started)
            started = time.process_time()
            load_json(path, "dump file")
            hooked.append(time.process_time() - started)
        size = os.path.getsize(path) / 1e6
        print("dump.json {:.1f} MB, {} entries; best of {} (CPU s): json.load {:.3f}, + duplicate check {:.3f} "
              "({:+.1f} %), load_json (+ numbers beyond float64) {:.3f} ({:+.1f} %)".format(
                  size, entries, args.n, min(plain), min(pairs), 100.0 * (min(pairs) / min(plain) - 1.0),
                  min(hooked), 100.0 * (min(hooked) / min(plain) - 1.0)))
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
