"""Do tensor files hold the value at the call when the script runs on a side stream? (CUDA; CPU otherwise)

    python bench/device_stream_check.py [--device cuda] [--emulate]

Both front-ends dump tensor files from copies taken at the call and moved to host memory by a writer
thread (``sinks/host_copies.py``). On an accelerator the call's copy is only queued on the script's stream;
if the writer read it before the device had made it, a file would hold whatever the memory held. This check
makes that race as likely as it can be: on a side stream it queues ~50 ms of device work
(``torch.cuda._sleep``), then a dumped ``torch.mul`` whose output is 3.0 everywhere, then changes that output
in place. Every file of the call must hold exactly 3.0 (the output) and 1.0 (the input), and the statistics
(reduced on the device at the call, read back in a batch later) must say 3.0. The same for the overflow
check's flags: a ``torch.div`` by zero behind the same wait must be found. It also reports the
synchronisations warned in the dump window (``torch.cuda.set_sync_debug_mode``, any thread).

On the CPU (no streams) the same run checks the values only. Exit status 1 when a value is wrong.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402

SLEEP_CYCLES = 100_000_000  # ~50 ms of a spinning kernel at 2 GHz


def _calls(x, overflow: bool) -> None:
    if overflow:
        torch.div(x, 0.0)  # inf everywhere: the overflow check must see it
        return
    y = torch.mul(x, 3.0)
    y.add_(1.0)


def _scenario(device: str, overflow: bool = False):
    """The dumped calls (on a side stream on CUDA); returns the host syncs counted inside."""
    x = torch.ones(1024, 1024, device=device)
    if device != "cuda":
        _calls(x, overflow)
        return None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with torch.cuda.stream(side):
                torch.cuda._sleep(SLEEP_CYCLES)  # the call's work waits behind this on the device
                _calls(x, overflow)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return sum("synchroniz" in str(warning.message) for warning in caught)


def _check(files, expected, what):
    bad = []
    for path in files:
        data = (np.load(path) if path.endswith(".npy")
                else torch.load(path, map_location="cpu", weights_only=True).float().numpy())
        if not np.all(data == expected):
            bad.append(f"{os.path.basename(path)}: expected all {expected}, got min {data.min()} max {data.max()}")
    print(f"{what:<48} {len(files)} file(s): {'OK' if files and (not bad) else 'WRONG'}")
    for line in bad:
        print("    " + line)
    return bool(files) and not bad


def _check_numbers(pairs, expected, what):
    """``pairs``: (max, min) of each record; all must be ``expected``."""
    good = bool(pairs) and all(high == expected and low == expected for high, low in pairs)
    print(f"{what:<48} {len(pairs)} record(s): {'OK' if good else 'WRONG'}{('' if good else f' {pairs}')}")
    return good


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _load_json(path: str):
    return json.loads(_read_text(path))


def _print_syncs(syncs) -> None:
    print(f"    synchronizations warned while the calls ran (any thread): {'n/a (CPU)' if syncs is None else syncs}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"),
                        help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--emulate", action="store_true",
                        help="on the CPU, take the accelerator's paths (copies and statistics as on a device)")
    args = parser.parse_args()
    if args.emulate:
        from ptdbg_ascend.sinks.host_copies import DEVICE_COPIES
        from ptdbg_ascend.statistics.planner import DEFAULTS

        DEFAULTS.defer_cpu = DEVICE_COPIES.on_cpu = True
    from ptdbg_ascend import (PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path,
                              set_dump_switch)
    from ptdbg_ascend.errors import OverflowLimitReached

    seed_all()
    out = tempfile.mkdtemp(prefix="device_stream_check_")
    ok = True
    try:
        debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=os.path.join(out, "debugger"))
        debugger.start()
        syncs = _scenario(args.device)
        debugger.stop()
        data = os.path.join(out, "debugger", "step0", "rank", "dump_tensor_data")
        ok &= _check(glob.glob(os.path.join(data, "Torch.mul.0.forward.output.*.pt")), 3.0,
                     "PrecisionDebugger: Torch.mul output")
        ok &= _check(glob.glob(os.path.join(data, "Torch.mul.0.forward.input.0.pt")), 1.0,
                     "PrecisionDebugger: Torch.mul input")
        leaves = _load_json(os.path.join(out, "debugger", "step0", "rank", "dump.json"))["data"]
        leaves = leaves.get("Torch.mul.0.forward", {})
        ok &= _check_numbers([(leaf["Max"], leaf["Min"]) for leaf in leaves.get("output", [])], 3.0,
                             "PrecisionDebugger: Torch.mul output statistics")
        _print_syncs(syncs)

        debugger = PrecisionDebugger(task="overflow_check", level="L1", dump_path=os.path.join(out, "overflow"))
        debugger.start()
        syncs = None
        try:  # the first overflow stops the run (overflow_nums 1): at the call on the CPU, at stop() on a device
            syncs = _scenario(args.device, overflow=True)
        except OverflowLimitReached:
            pass
        try:
            debugger.stop()
        except OverflowLimitReached:
            pass
        found = glob.glob(os.path.join(out, "overflow", "step0", "rank", "dump.json"))
        caught = bool(found) and "Torch.div.0.forward" in _load_json(found[0])["data"]
        print(f"{'PrecisionDebugger: overflow of Torch.div found':<48} {'OK' if caught else 'WRONG'}")
        ok &= caught
        _print_syncs(syncs)

        set_dump_path(os.path.join(out, "legacy", "dump.pkl"), dump_tag="check")
        register_hook(torch.nn.Linear(1, 1), acc_cmp_dump)
        set_dump_switch("ON", mode="all")
        syncs = _scenario(args.device)
        set_dump_switch("OFF")
        npy = glob.glob(os.path.join(out, "legacy", "check_v1.0", "rank*", "dump", "Torch_mul_*_forward_*.npy"))
        ok &= _check([path for path in npy if "_output" in path], 3.0, "legacy: Torch_mul output")
        ok &= _check([path for path in npy if "_input.0" in path], 1.0, "legacy: Torch_mul input")
        records = [json.loads(line) for path in glob.glob(os.path.join(out, "legacy", "check_v1.0", "rank*", "*.pkl"))
                   for line in _read_text(path).splitlines()]
        ok &= _check_numbers([tuple(record[5][:2]) for record in records
                              if record[0].startswith("Torch_mul_") and "_forward_output" in record[0]],
                             3.0, "legacy: Torch_mul output statistics")
        _print_syncs(syncs)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"device {args.device}, torch {torch.__version__}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
