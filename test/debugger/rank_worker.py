"""One rank of the distributed PrecisionDebugger test (run as a script: rank, world, init file, config)."""

import atexit
import os
import sys

import torch
import torch.distributed as dist

from ptdbg_ascend import PrecisionDebugger


def main(rank: int, world: int, init_file: str, config_path: str) -> None:
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    debugger = PrecisionDebugger(config_path=config_path)
    x = torch.full((2, 3), float(rank + 1))  # before start: torch.full is wrapped (the original 4.0's list)
    for _ in range(2):
        debugger.start()
        out = model(x).sum()
        out.backward()
        grad = model.weight.grad.clone()
        dist.all_reduce(grad)
        debugger.stop()
        debugger.step()
        model.weight.grad = None
    dist.barrier()  # gloo: a rank tearing down while its peer still talks can abort (std::terminate)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
    # gloo's C++ teardown can still abort a rank (std::terminate, about 1 run in 50 even after the barrier):
    # run Python's exit handlers (the dump's own flushing included), then leave without C++ destructors.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(0)
