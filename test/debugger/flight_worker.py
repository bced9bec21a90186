"""A training run under the flight recorder, as a script (the SIGTERM, uncaught-exception and torch.distributed
tests): ``flight_worker.py MODE DUMP_PATH [RANK WORLD INIT_FILE]``.

MODE: ``sigterm`` (the process sends itself SIGTERM at step 5), ``uncaught`` (a ValueError at step 6, outside
any ``with``), ``ranks`` (gloo: rank 1's input overflows at step 3; rank 0 stays finite until the all_reduce).
"""

import atexit
import os
import signal
import sys

import numpy
import torch

from ptdbg_ascend import FlightRecorder, FlightRecorderTriggered


def batch(step: int, rank: int = 0) -> torch.Tensor:
    values = numpy.random.default_rng(100 * rank + step).standard_normal((4, 8)).astype(numpy.float32)
    return torch.from_numpy(values)


def main(mode: str, dump_path: str, rank: int = 0, world: int = 1, init_file: str = "") -> None:
    if mode == "ranks":
        torch.distributed.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    recorder = FlightRecorder(dump_path, last_steps=2)
    recorder.start()
    try:
        for step in range(10):
            x = batch(step, rank)
            if mode == "ranks" and rank == 1 and step == 3:
                x = torch.from_numpy(numpy.full((4, 8), 1e38, dtype=numpy.float32))
            out = torch.exp(model(x)).sum()
            if mode == "ranks":
                torch.distributed.all_reduce(out)
            if mode == "sigterm" and step == 5:
                os.kill(os.getpid(), signal.SIGTERM)
            if mode == "uncaught" and step == 6:
                raise ValueError("planted failure at step 6")
            recorder.step(float(out))
    except FlightRecorderTriggered as error:
        print("TRIGGERED", error, flush=True)
    if mode == "ranks":
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(arguments[0], arguments[1], *(int(value) for value in arguments[2:4]), *arguments[4:])
    if arguments[0] == "ranks":  # gloo's C++ teardown can abort a rank: run the exit handlers, leave without it
        atexit._run_exitfuncs()
        sys.stdout.flush()
        os._exit(0)
