"""One rank of a data-parallel training run dumped with the legacy API, as a script (the cross-rank tests of
``test_rank_summary.py``): ``ddp_worker.py RANK WORLD INIT_FILE OUT_DIR PLANTED_RANK``.

Each process trains a two-layer net for two steps (forward, backward, ``dist.all_reduce`` of every gradient
divided by the world size, an SGD update) four times over, each run dumped under its own tag in
``OUT_DIR/{tag}_v1.0/rank{R}/``: ``bench`` and ``equal`` (the same clean run twice), ``nan`` (rank
PLANTED_RANK's first ``F.linear`` of step 0 writes NaN into its output) and ``error`` (that output is 2 % off).
One process runs all four so that torch and gloo start once per rank.

The faulty kernel is installed before ``ptdbg_ascend`` wraps ``F.linear``, as ``sample/legacy_train.py`` does:
the dump records it as the one API call it is on a device, its inputs matching the bench and its output not.
"""

import atexit
import os
import sys

import numpy
import torch
import torch.distributed as dist
import torch.nn.functional as F

TAGS = ("bench", "equal", "nan", "error")
PLANT = {"mode": None, "calls": 0}  # the faulty kernel's state: which run, and F.linear calls since it began


def install_faulty_linear() -> None:
    """``F.linear`` whose first call of a planted run writes NaN into its output (``nan``) or scales it by 1.02
    (``error``); any other call is exact."""
    exact = F.linear

    def linear(x, weight, bias=None):
        out = exact(x, weight, bias)
        PLANT["calls"] += 1
        if PLANT["mode"] is not None and PLANT["calls"] == 1:
            # inside the wrapped call: not recorded as calls of their own; gradients flow through
            out = out * 1.02 if PLANT["mode"] == "error" else out.clone()
            if PLANT["mode"] == "nan":
                out[0, 1] = float("nan")
        return out

    F.linear = linear


def batch(step: int, rank: int) -> torch.Tensor:
    values = numpy.random.default_rng(100 * rank + step).standard_normal((4, 6)).astype(numpy.float32)
    return torch.from_numpy(values)


def train(tag: str, rank: int, world: int, out_dir: str, model: torch.nn.Module, legacy) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape) * 0.5)
    inputs = [batch(step, rank) for step in range(2)]
    legacy.set_dump_path(os.path.join(out_dir, "dump.pkl"), dump_tag=tag)
    from ptdbg_ascend.dump.session import get_session

    get_session().reset_counters()  # every run's names start at 0, as in a process of its own
    legacy.set_dump_switch("ON")
    for x in inputs:
        loss = model(x).pow(2).mean()
        loss.backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad.div_(world)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.sub_(0.1 * parameter.grad)
                parameter.grad = None
    legacy.set_dump_switch("OFF")


def main(rank: int, world: int, init_file: str, out_dir: str, planted_rank: int) -> None:
    if rank == planted_rank:
        install_faulty_linear()
    import ptdbg_ascend as legacy  # after the faulty kernel: it wraps that one

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    legacy.register_hook(model, legacy.acc_cmp_dump)
    for tag in TAGS:
        PLANT["mode"] = tag if tag in ("nan", "error") and rank == planted_rank else None
        PLANT["calls"] = 0
        train(tag, rank, world, out_dir, model, legacy)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
    # gloo's C++ teardown can abort a rank (test/debugger/rank_worker.py): run Python's exit handlers (the
    # dump's flushing), then leave without C++ destructors.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(0)
