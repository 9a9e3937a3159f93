"""Processes for `accio bench`: one rank per process under mpirun (mpi4py), or a single process.

IOR's rules: a barrier before every timed phase, and the phase's bandwidth is the total bytes over
(latest end - earliest start) across all ranks. Each rank times itself with CLOCK_MONOTONIC; ranks
on other hosts have their clock offset to rank 0 estimated once (the round trip with the smallest
delay of several), so that start and end times can be compared across nodes.
"""
from __future__ import annotations

import os
import socket
import time

from .._usage import UsageError

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


class Solo:
    """The single-process case: every collective is the identity."""
    rank, size, offset_ns, ranks_here = 0, 1, 0, 1

    def barrier(self) -> None:
        pass

    def allreduce(self, value, op: str):
        return value

    def bcast(self, value):
        return value

    def gather(self, value):
        return [value]

    def abort(self, code: int) -> None:
        pass

    def leave(self, deadline_s: float) -> bool:
        return True


class Mpi:
    def __init__(self):
        try:
            from mpi4py import MPI
        except ImportError:
            raise UsageError("running under an MPI launcher but mpi4py is not installed: "
                             "pip install 'accio-io[mpi]' (or pip install mpi4py)") from None
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.offset_ns = self._clock_offset()
        self._leaving = self.comm.Dup()  # its own communicator: an interrupted rank's barrier never
        # pairs with the next collective of a rank that is still measuring

    def leave(self, deadline_s: float) -> bool:
        """After an interruption: whether every rank leaves too within deadline_s (a barrier of their
        own). A rank signalled alone cleaned up and then waited in MPI_Finalize while the others
        waited for it at their next barrier, for ever (review, session 25): on False, abort()."""
        req = self._leaving.Ibarrier()
        end = time.monotonic() + deadline_s
        while not req.Test():
            if time.monotonic() > end:
                return False
            time.sleep(1e-3)
        return True

    def barrier(self) -> None:
        """MPI_Ibarrier, waited for in Python: a rank waiting for one that was interrupted (Ctrl-C to
        mpirun, which passes SIGTERM on) still takes its signal and removes its files; in a blocking
        MPI call the Python handler never ran, and the rank was killed with its files left (bench
        audit, session 25). Polled without a pause for the first millisecond (the ranks leave a
        barrier before a timed phase together), then every 100 us."""
        req = self.comm.Ibarrier()
        t0 = time.perf_counter()
        while not req.Test():
            if time.perf_counter() - t0 > 1e-3:
                time.sleep(1e-4)

    # The object collectives have no non-blocking form: each starts with the barrier above, so that
    # every rank is there before any blocks.
    def allreduce(self, value, op: str):
        self.barrier()
        return self.comm.allreduce(value, op={"min": self._mpi.MIN, "max": self._mpi.MAX, "sum": self._mpi.SUM}[op])

    def bcast(self, value):
        self.barrier()
        return self.comm.bcast(value, root=0)

    def gather(self, value):
        self.barrier()
        return self.comm.gather(value, root=0)

    def abort(self, code: int) -> None:
        """Ends every rank (MPI_Abort): for an error on one rank, which the others would wait for at
        their next collective. mpirun sends them SIGTERM, which they take as Ctrl-C (their files go)."""
        self.comm.Abort(code)

    def _clock_offset(self, rounds: int = 16) -> int:
        """This rank's CLOCK_MONOTONIC minus rank 0's (0 on rank 0's host: the clock is system-wide)."""
        host = socket.gethostname()
        hosts = self.comm.allgather(host)
        self.ranks_here = hosts.count(host)  # the ranks that share this host's memory
        offset = 0
        for peer in range(1, self.size):
            if hosts[peer] == hosts[0]:
                continue
            if self.rank == 0:
                for _ in range(rounds):
                    self.comm.send(time.monotonic_ns(), dest=peer, tag=7)
                    self.comm.recv(source=peer, tag=8)
            elif self.rank == peer:
                best = None
                for _ in range(rounds):
                    t0 = time.monotonic_ns()  # our clock when we start waiting
                    theirs = self.comm.recv(source=0, tag=7)
                    t1 = time.monotonic_ns()
                    self.comm.send(None, dest=0, tag=8)
                    # rank 0 stamped `theirs` somewhere in [t0, t1] of our clock; keep the tightest bracket
                    if best is None or t1 - t0 < best[0]:
                        best = (t1 - t0, (t0 + t1) // 2 - theirs)
                offset = best[1]
        return offset


def under_mpi() -> bool:
    return any(v in os.environ for v in _MPI_ENV)


def world():
    return Mpi() if under_mpi() else Solo()
