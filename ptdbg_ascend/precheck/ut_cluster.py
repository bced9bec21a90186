"""``multi_run_ut`` across machines: the ranks of a ``torchrun`` launch (``RANK``/``WORLD_SIZE``/
``MASTER_ADDR`` set) share the API calls, and rank 0 gathers the rows and writes the CSVs.

Communication is ``torch.distributed`` on the gloo backend (CPU, everywhere): the default process group
when the launcher's script has not initialised one (it is then torn down at the end), else a gloo group
beside the caller's (an NCCL/HCCL default group cannot carry Python objects from the CPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, TypeVar

from ptdbg_ascend.errors import ParameterError

T = TypeVar("T")


def launched_ranks() -> Optional[Tuple[int, int]]:
    """``(rank, world_size)`` from the launcher's environment when it names more than one rank, else
    None (a plain run, or ``torchrun --nproc_per_node 1`` on one machine: nothing to share)."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        rank_value, world_value = int(rank), int(world)
    except ValueError:
        raise ParameterError("RANK/WORLD_SIZE", (rank, world), "must be integers (as torchrun sets them)") from None
    if world_value < 1 or not 0 <= rank_value < world_value:
        raise ParameterError("RANK/WORLD_SIZE", (rank, world), "must satisfy 0 <= RANK < WORLD_SIZE")
    return (rank_value, world_value) if world_value > 1 else None


@dataclass
class Cluster:
    """This process's place among the ranks and the gloo group they talk over."""

    rank: int
    world_size: int
    group: Any = None  # None: the default group (gloo)
    created: bool = False  # this module initialised the default group (and tears it down)

    def share(self, items: Sequence[Tuple[int, T]]) -> List[Tuple[int, T]]:
        """This rank's share of ``(position, item)``: every world_size-th position from its rank (a
        deterministic split that spreads neighbouring, similar calls over the ranks)."""
        return [item for item in items if item[0] % self.world_size == self.rank]

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def gather(self, value: Any) -> Optional[List[Any]]:
        """Every rank's ``value`` in rank order on rank 0; None on the others."""
        import torch.distributed as dist

        out: Optional[List[Any]] = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(value, out, dst=0, group=self.group)
        return out

    def all_gather(self, value: Any) -> List[Any]:
        """Every rank's ``value`` in rank order, on every rank."""
        import torch.distributed as dist

        out: List[Any] = [None] * self.world_size
        dist.all_gather_object(out, value, group=self.group)
        return out

    def leave(self) -> None:
        """Tear the default group down if :func:`join` created it."""
        import torch.distributed as dist

        if self.created and dist.is_initialized():
            dist.destroy_process_group()


def join(rank: int, world_size: int) -> Cluster:
    """Join the launch's ranks (see the module doc). ParameterError when the launcher's rendezvous
    variables are missing."""
    import torch.distributed as dist

    if dist.is_initialized():
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return Cluster(dist.get_rank(), dist.get_world_size(), group, created=False)
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ParameterError(missing[0], os.environ.get(missing[0]), "must be set beside RANK and WORLD_SIZE (launch "
                             "with torchrun, which sets them all)")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return Cluster(rank, world_size, None, created=True)
