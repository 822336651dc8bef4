"""torchrun: how the torch backend starts the replicas of a data-parallel run, and how it reads their failures.

Parent side only: nothing here imports torch. One process per node runs `python -m torch.distributed.run`,
which starts this node's replicas (one worker process each) with the replica contract of
harness.seam.distributed in their environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE).
"""

from __future__ import annotations

import re
import sys
import uuid

from harness.seam.distributed import (
    Cluster,
    Launch,
    LaunchProcess,
    describe_exit,
    threads_per_replica,
)
from harness.seam.runspec import RunSpec

#: Ports a multi-node rendezvous moves through, one per run of the plan (its index mod this).
RENDEZVOUS_PORTS = 32

_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n?\s*exitcode\s*:\s*(-?\d+)", re.S)


def torchrun_argv(local_replicas: int, cluster: Cluster) -> list[str]:
    """torchrun's command line, without the module it runs: one node on a port of its own, several at node 0's
    rendezvous.

    One node: what `--standalone` means in current torch (a c10d rendezvous at localhost:0, the port the
    system gives, and an id of its own), spelled out: torch up to 2.1 made `--standalone` port 29400, so two
    runs at once on one machine (two sessions, or two users) met at that port and one failed with "Address
    already in use".
    Several nodes: torchrun's static rendezvous at --rdzv-endpoint, so node_rank 0 holds global rank 0; the
    port moves by the run's place in the plan, so a node that starts the next run early cannot meet the
    previous run's store.
    """
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(local_replicas),
            "--max-restarts", "0", "--monitor-interval", "0.5"]
    if cluster.multi_node:
        host, port = cluster.endpoint()
        return argv + ["--nnodes", str(cluster.nnodes), "--node-rank", str(cluster.node_rank), "--master-addr", host,
                       "--master-port", str(port + cluster.run_index % RENDEZVOUS_PORTS),
                       "--rdzv-id", str(cluster.rdzv_id)]
    return argv + ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                   "--rdzv-id", uuid.uuid4().hex]


def torchrun_launch(spec: RunSpec, worker: list[str], cluster: Cluster) -> Launch:
    """torchrun of this node's replicas of `spec`, one process each; `worker` is one replica's command."""
    replicas = int(spec.params.get("replicas") or 1)
    local = replicas // cluster.nnodes
    argv = torchrun_argv(local, cluster)
    threads = threads_per_replica(spec.cpu_threads or {}, local)
    first = cluster.node_rank * local
    ranks = tuple(range(first, first + local))
    shown = " ".join(a for a in argv[1:] if a != sys.executable)
    process = LaunchProcess(argv + ["-m"] + worker[2:], {"OMP_NUM_THREADS": str(threads["intra_op"])}, ranks)
    return Launch(processes=[process], api=f"torchrun ({shown} -m harness.worker): one process per replica",
                  failures_from_log=torchrun_failures, local_ranks=ranks)


def torchrun_failures(log: str) -> dict[int, str]:
    """The ranks torchrun's failure summary names (`rank : 1 (local_rank: 1)` / `exitcode : -9`), with how each ended."""
    out: dict[int, str] = {}
    root = log.rfind("Root Cause")
    if root >= 0:  # the first observed failure first: the record's status takes the first rank that died as the cause
        match = _TORCHRUN_FAILURE.search(log, root)
        if match:
            out[int(match.group(1))] = f"{describe_exit(int(match.group(2)))} (torchrun's root cause)"
    for match in _TORCHRUN_FAILURE.finditer(log):
        rank, code = int(match.group(1)), int(match.group(2))
        out.setdefault(rank, f"{describe_exit(code)} (torchrun's failure summary)")
    return out
