"""``compare_distributed`` across machines: the processes of a ``torchrun`` launch (RANK/WORLD_SIZE/MASTER_ADDR
set, WORLD_SIZE > 1) share the rank pairs; rank 0 writes the summary. torch is imported here only, lazily.

* Joining: :func:`ptdbg_ascend.precheck.ut_cluster.join` (gloo; a default group of the launcher's is reused).
* Who compares what: every process says which pairs it sees (their files are on its machine, shared storage or
  not) and which it finds already done (a trusted completion record in its output directory), over
  ``all_gather_object``. :func:`assign` then gives each pair left to the process seeing it that has the fewest
  pairs so far, in rank order, the lower process on a tie (on shared storage: pair i to process i % world): the
  same answer on every process, no message. A pair no process sees whole is "not compared: files not found
  together on any machine".
* Results: each process puts each pair's end in the launch's c10d store (the TCPStore torchrun serves) as soon
  as it is compared, and its "done" mark at the end; a heartbeat thread counts up a key every few seconds. Rank 0,
  after its own pairs, reads them; a process whose heartbeat stops for ``peer_timeout`` seconds before its done
  mark is dead: the pairs it had not put are "lost: process died" in the summary, the others are kept. (A gloo
  ``gather_object`` would block rank 0 in one collective: a dead peer ends it with an error that loses every
  process's results, a hung one blocks it for the group's timeout; a slow peer cannot be told from a dead one.)
  The store's values are pickles of our own processes' results (as ``gather_object`` would send).
* Under torchrun a process that dies is followed by its machine's other processes (the agent stops them): their
  compared pairs are kept (in the store and in their completion records), the rest are lost, and a re-run
  resumes from the completion records. When rank 0's own machine loses a process, rank 0 is stopped too and no
  summary is written until the re-run.
"""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.comparison.rank_pool import PairDone
from ptdbg_ascend.comparison.rank_records import PLAIN_RANK, PairTask, RankView
from ptdbg_ascend.comparison.rank_summary import PairResult
from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.log import logger

LOST_PROCESS = "lost: process died"
NOT_TOGETHER = "files not found together on any machine"
_POLL = 0.2  # seconds between rank 0's looks at the store


class Launch(NamedTuple):
    rank: int
    world_size: int
    peer_timeout: float


def launched(peer_timeout: Any) -> Optional[Launch]:
    """The torchrun launch this process is part of (None: a plain run, or a world of 1); ``peer_timeout``
    checked in either case (ParameterError naming it)."""
    if isinstance(peer_timeout, bool) or not isinstance(peer_timeout, (int, float)) \
            or not 0 < peer_timeout < float("inf"):
        raise ParameterError("peer_timeout", peer_timeout, "must be a number of seconds > 0 (how long rank 0 of a "
                             "torchrun launch waits for a silent process; default 120)")
    from ptdbg_ascend.precheck.ut_cluster import launched_ranks

    ranks = launched_ranks()
    return None if ranks is None else Launch(ranks[0], ranks[1], float(peer_timeout))


def assign(seen: Sequence[Sequence[Tuple[int, str]]], done: Sequence[str]) -> Dict[str, int]:
    """``{pair: process}`` of the pairs not ``done``: ``seen[p]`` is the ``(rank number, pair)`` process p sees;
    each pair, in rank order, to the process seeing it with the fewest pairs so far (the lower on a tie)."""
    seers: Dict[Tuple[int, str], List[int]] = {}
    for process, pairs in enumerate(seen):
        for key in pairs:
            seers.setdefault(tuple(key), []).append(process)
    load = [0] * len(seen)
    owner = {}
    for number, pair in sorted(seers):
        if pair in done:
            continue
        chosen = min(seers[number, pair], key=lambda process: (load[process], process))
        load[chosen] += 1
        owner[pair] = chosen
    return owner


def merge(views: Sequence[RankView], resumed: Sequence[Dict[str, PairResult]]
           ) -> Tuple[RankView, Dict[str, PairResult], Dict[str, str]]:
    """The launch's view from every process's: the pairs any process sees (rank order), the results resumed
    anywhere, and ``{rank directory: reason}`` of the ranks on both sides but on no one machine together."""
    tasks: Dict[str, PairTask] = {}
    for view in views:
        for task in view.tasks:
            tasks.setdefault(task.pair, task)
    every_resumed: Dict[str, PairResult] = {}
    for done in resumed:
        for pair, result in done.items():
            every_resumed.setdefault(pair, result)
    skipped = sorted({pair for view in views for pair in view.skipped} - set(tasks), key=rank_order)
    npu = {name for view in views for name in view.npu_names}
    bench = {name for view in views for name in view.bench_names}
    paired = {part for pair in list(tasks) + skipped for part in pair.split("-")}
    apart = {name: NOT_TOGETHER for name in sorted(npu & bench - paired, key=rank_order)}
    ordered = sorted(tasks.values(), key=lambda task: (task.rank, task.pair))
    return (RankView(ordered, skipped, sorted(npu, key=rank_order), sorted(bench, key=rank_order),
                     sorted(npu - bench - paired, key=rank_order), sorted(bench - npu - paired, key=rank_order)),
            every_resumed, apart)


def rank_order(name: str) -> Tuple[int, str]:
    digits = name[len("rank"):].split("-")[0]
    return (int(digits) if digits.isdigit() else PLAIN_RANK, name)


class World:
    """This process among the launch's: the gloo group (``precheck.ut_cluster.Cluster``) and the c10d store."""

    def __init__(self, launch: Launch) -> None:
        import torch.distributed as dist
        from ptdbg_ascend.precheck.ut_cluster import join

        self.launch = launch
        self.cluster = join(launch.rank, launch.world_size, task="compare_distributed")
        self.store = dist.distributed_c10d._get_default_store()  # the launch's TCPStore (no public getter)
        self.prefix = ""
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None

    @property
    def rank(self) -> int:
        return self.launch.rank

    def start(self, stamp: str) -> None:
        """Name this run's keys after ``stamp`` (rank 0's, broadcast) and start the heartbeat."""
        self.prefix = f"ptdbg_compare/{stamp}/"
        interval = min(2.0, self.launch.peer_timeout / 4)

        def beat() -> None:
            while not self._stop.wait(interval):
                try:
                    self.store.add(self.prefix + f"beat/{self.rank}", 1)
                except RuntimeError:  # the store is gone (rank 0's side ended): nobody is waiting any more
                    return

        self._beat = threading.Thread(target=beat, name="ptdbg-compare-heartbeat", daemon=True)
        self._beat.start()

    def publish(self, done: PairDone) -> None:
        """Put one pair's end in the store (as soon as it is compared: a later death keeps it)."""
        self.store.set(self.prefix + f"pair/{done.pair}", pickle.dumps(done))

    def end_share(self) -> None:
        """Mark this process's share done and stop the heartbeat."""
        self.store.set(self.prefix + f"done/{self.rank}", b"1")
        self._stop.set()

    def collect(self, owner: Dict[str, int]) -> Tuple[List[PairDone], Dict[str, str]]:
        """On rank 0: every other process's pair ends, and ``{pair: reason}`` of those lost with a dead process."""
        pending = {process: [pair for pair, p in owner.items() if p == process] for process in set(owner.values())
                   if process != self.rank}
        last = {process: (-1, time.monotonic()) for process in pending}
        ends: List[PairDone] = []
        lost: Dict[str, str] = {}
        while pending:
            for process in sorted(pending):
                if self.store.check([self.prefix + f"done/{process}"]):
                    ends.extend(self._ends(pending.pop(process), lost, process))
                    continue
                count = self.store.add(self.prefix + f"beat/{process}", 0)
                if count != last[process][0]:
                    last[process] = (count, time.monotonic())
                elif time.monotonic() - last[process][1] > self.launch.peer_timeout:
                    logger.warning("compare_distributed: process {} of the launch went silent for {:g} s (no "
                                   "heartbeat): its pairs not yet compared are lost.".format(
                                       process, self.launch.peer_timeout))
                    ends.extend(self._ends(pending.pop(process), lost, process))
            time.sleep(_POLL)
        return ends, lost

    def _ends(self, pairs: Sequence[str], lost: Dict[str, str], process: int) -> List[PairDone]:
        ends = []
        for pair in pairs:
            key = self.prefix + f"pair/{pair}"
            if self.store.check([key]):
                ends.append(pickle.loads(self.store.get(key)))  # our own process's PairDone (see the module doc)
            else:
                lost[pair] = f"{LOST_PROCESS} (process {process} of the launch)"
        return ends

    def leave(self) -> None:
        self._stop.set()
        self.cluster.leave()
