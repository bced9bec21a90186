"""A data-parallel training run over gloo dumped on every rank, as a script (the cross-rank tests of
``test_cross_rank_ddp.py``): ``ddp_worker.py WORLD INIT_FILE OUT_DIR PLANTED_RANK legacy|msprobe``. The script
imports torch once and forks one process per rank (rank 0 to WORLD-1): four processes each importing torch and
``torch._inductor`` (which ``seed_all`` loads) take 12 s more on 2 cores. Its exit status is 1 when a rank failed.

Each run trains a two-layer net for two steps (forward, backward, ``dist.all_reduce`` of every gradient divided by
the world size, an SGD update) from the same weights and data. One process makes several runs so that torch and
gloo start once per rank:

* ``legacy``: four runs with the legacy API, each under its own tag in ``OUT_DIR/{tag}_v1.0/rank{R}/``:
  ``bench`` and ``equal`` (the same clean run twice), ``nan`` (rank PLANTED_RANK's first ``F.linear`` writes NaN
  into its output) and ``error`` (that output is 2 % off).
* ``msprobe``: two runs with ``PrecisionDebugger`` (task tensor), one per msprobe step:
  ``OUT_DIR/step0/rank{R}/dump.json`` the clean run, ``OUT_DIR/step1/...`` the NaN run.

The faulty kernel is installed before ``ptdbg_ascend`` wraps ``F.linear``, as ``sample/legacy_train.py`` does:
the dump records it as the one API call it is on a device, its inputs matching the bench and its output not.
"""

import atexit
import json
import os
import sys
import traceback

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


def train(rank: int, world: int, model: torch.nn.Module, start, stop) -> None:
    """One run: the weights reset, two steps between ``start()`` and ``stop()`` (the dump's window)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape) * 0.5)
    inputs = [batch(step, rank) for step in range(2)]
    start()
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
    stop()


def plant(mode, rank: int, planted_rank: int) -> None:
    PLANT["mode"] = mode if rank == planted_rank else None
    PLANT["calls"] = 0


def legacy_runs(rank: int, world: int, out_dir: str, planted_rank: int, model: torch.nn.Module) -> None:
    import ptdbg_ascend as legacy
    from ptdbg_ascend.dump.session import get_session

    legacy.register_hook(model, legacy.acc_cmp_dump)
    for tag in TAGS:
        plant(tag if tag in ("nan", "error") else None, rank, planted_rank)
        legacy.set_dump_path(os.path.join(out_dir, "dump.pkl"), dump_tag=tag)
        get_session().reset_counters()  # every run's names start at 0, as in a process of its own
        train(rank, world, model, lambda: legacy.set_dump_switch("ON"), lambda: legacy.set_dump_switch("OFF"))
        dist.barrier()


def msprobe_runs(rank: int, world: int, out_dir: str, planted_rank: int, model: torch.nn.Module) -> None:
    from ptdbg_ascend import PrecisionDebugger

    config = os.path.join(out_dir, f"config{rank}.json")
    os.makedirs(out_dir, exist_ok=True)
    with open(config, "w", encoding="utf-8") as handle:
        json.dump({"task": "tensor", "dump_path": out_dir, "level": "L1"}, handle)
    debugger = PrecisionDebugger(config_path=config)
    for mode in (None, "nan"):
        plant(mode, rank, planted_rank)
        train(rank, world, model, debugger.start, debugger.stop)
        debugger.step()
        dist.barrier()


def main(rank: int, world: int, init_file: str, out_dir: str, planted_rank: int, dump_format: str) -> None:
    if rank == planted_rank:
        install_faulty_linear()  # before ptdbg_ascend wraps F.linear: it wraps this one
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    runs = msprobe_runs if dump_format == "msprobe" else legacy_runs
    runs(rank, world, out_dir, planted_rank, model)
    dist.destroy_process_group()


def fork_ranks(world: int, init_file: str, out_dir: str, planted_rank: int, dump_format: str) -> int:
    """Run every rank in a forked child (nothing of torch.distributed or of the dump has started here yet);
    returns 0 when every rank exited with 0."""
    import torch._inductor  # noqa: F401  (once, before the fork: every rank's seed_all needs it)

    children = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                main(rank, world, init_file, out_dir, planted_rank, dump_format)
                # gloo's C++ teardown can abort a rank (test/debugger/rank_worker.py): run Python's exit handlers
                # (the dump's flushing), then leave without C++ destructors.
                atexit._run_exitfuncs()
                status = 0
            except BaseException:  # the child must never return into the parent's loop
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        children.append(pid)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(fork_ranks(int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
