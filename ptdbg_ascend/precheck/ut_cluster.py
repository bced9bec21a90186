"""``multi_run_ut`` across machines: the ranks of a ``torchrun`` launch (``RANK``/``WORLD_SIZE``/
``MASTER_ADDR`` set) share the API calls, and rank 0 gathers the rows and writes the CSVs.

Communication is ``torch.distributed`` on the gloo backend (CPU, everywhere): the default process group
when the launcher's script has not initialised one (it is then torn down at the end), else a gloo group
beside the caller's (an NCCL/HCCL default group cannot carry Python objects from the CPU).

Joining waits at most ``cluster_timeout`` seconds for every rank (torch's own default is 30 minutes of
silence): RANK/WORLD_SIZE come from the environment, and a stale ``RANK=0 WORLD_SIZE=2`` left in a shell
would otherwise make a run on one machine wait for a peer that never comes. Rank 0 serves the rendezvous
(a TCPStore on MASTER_ADDR:MASTER_PORT) and waits for the others; the others first wait, quietly, until
that address accepts a connection (torch's client logs a C++ trace per failed try). Once all have joined,
the collectives keep torch's default timeout: ranks legitimately wait for the slowest one's block.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, List, Optional, Sequence, Tuple, TypeVar

from ptdbg_ascend.errors import ClusterJoinError, ParameterError
from ptdbg_ascend.log import logger

T = TypeVar("T")
DEFAULT_TIMEOUT = 300.0  # seconds every rank has to join (cluster_timeout)
_PROBE_INTERVAL = 0.5


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


def check_timeout(cluster_timeout: Any) -> float:
    """``cluster_timeout`` as seconds > 0; ParameterError otherwise."""
    if isinstance(cluster_timeout, bool) or not isinstance(cluster_timeout, (int, float)) \
            or not 0 < cluster_timeout < float("inf"):
        raise ParameterError("cluster_timeout", cluster_timeout, "must be a number of seconds > 0 (how long every "
                             "rank of a torchrun launch has to join; default {:g})".format(DEFAULT_TIMEOUT))
    return float(cluster_timeout)


def join(rank: int, world_size: int, timeout: float = DEFAULT_TIMEOUT, task: str = "multi_run_ut") -> Cluster:
    """Join the launch's ranks (see the module doc), waiting at most ``timeout`` seconds (default 300)
    for all of them; ``task`` (default "multi_run_ut"; also "compare_distributed") names the caller in the
    messages. ParameterError when the launcher's rendezvous variables are missing or malformed; ClusterJoinError,
    naming RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, when the ranks do not all come."""
    import torch.distributed as dist

    if dist.is_initialized():
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        return Cluster(dist.get_rank(), dist.get_world_size(), group, created=False)
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ParameterError(missing[0], os.environ.get(missing[0]), "must be set beside RANK and WORLD_SIZE (launch "
                             "with torchrun, which sets them all)")
    address, port_text = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ParameterError("MASTER_PORT", port_text, "must be a TCP port number, 1..65535 (as torchrun sets it)")
    where = ("RANK={} WORLD_SIZE={} MASTER_ADDR={} MASTER_PORT={}, all from the environment".format(
        rank, world_size, address, port_text))
    logger.info("{}: waiting up to {:g} s for the {} ranks of WORLD_SIZE to join ({}).".format(
        task, timeout, world_size, where))
    deadline = time.monotonic() + timeout
    try:
        if rank != 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            _wait_for_address(address, int(port_text), deadline)
        left = max(1.0, deadline - time.monotonic())
        rendezvous = dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timedelta(seconds=left))
        store = next(iter(rendezvous))[0]
    except (RuntimeError, OSError, ValueError) as error:  # torch's DistError is a RuntimeError
        late = time.monotonic() >= deadline - 1.0
        raise ClusterJoinError(
            "{}: {} the other ranks: this process is {}. torchrun sets these; a stale RANK/"
            "WORLD_SIZE left in the shell is the usual cause (unset RANK WORLD_SIZE to run on this machine alone). "
            "Start every rank within cluster_timeout (--cluster-timeout, now {:g} s). torch said: {}".format(
                task, f"gave up after {timeout:g} s waiting for" if late else "could not join", where, timeout,
                " ".join(str(error).split())[:300])) from None
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    return Cluster(rank, world_size, None, created=True)


def _wait_for_address(address: str, port: int, deadline: float) -> None:
    """Until ``deadline``: try a plain TCP connection to rank 0's rendezvous (closed at once: the store
    ignores it); TimeoutError when it never accepts."""
    while True:
        try:
            with socket.create_connection((address, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return
        except OSError as error:
            if time.monotonic() + _PROBE_INTERVAL >= deadline:
                raise TimeoutError(f"nothing accepted a connection at {address}:{port} ({error})") from None
        time.sleep(_PROBE_INTERVAL)
