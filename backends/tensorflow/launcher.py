"""How the TensorFlow backend starts the replicas of a data-parallel run: TF_CONFIG and its worker processes.

Parent side only: nothing here imports TensorFlow. `strategy: multi_worker` (MultiWorkerMirroredStrategy)
starts one worker process per replica of this node, each told its task in the cluster through TF_CONFIG;
`strategy: mirrored` (MirroredStrategy) starts one process holding every replica. Each process's
environment follows the replica contract of harness.seam.distributed.
"""

from __future__ import annotations

import json
import os

from harness.errors import Unsupported
from harness.seam.distributed import (
    Cluster,
    Launch,
    LaunchProcess,
    free_ports,
    threads_per_replica,
)
from harness.seam.runspec import RunSpec

NO_TF_CONFIG = (
    "TensorFlow data-parallel over {nnodes} nodes needs TF_CONFIG in the environment of every node's harness, "
    "with the cluster's {replicas} workers ({{\"cluster\": {{\"worker\": [\"host0:port\", ...]}}}}); harness sets each "
    "worker's task itself (docs/distributed.md)"
)
MIRRORED_MULTI_NODE = (
    "tensorflow.strategy=mirrored runs every replica in one process on one machine; over {nnodes} nodes use "
    "tensorflow.strategy=multi_worker (MultiWorkerMirroredStrategy)"
)


def tensorflow_launch(spec: RunSpec, worker: list[str], cluster: Cluster) -> Launch:
    """The processes that start this node's replicas of `spec` under its `strategy` option; `worker` is one
    replica's command. Unsupported for a layout TensorFlow cannot start (mirrored over nodes, no TF_CONFIG)."""
    replicas = int(spec.params.get("replicas") or 1)
    if (spec.options or {}).get("strategy") == "mirrored":
        return mirrored_launch(replicas, spec.cpu_threads, worker, cluster)
    return multi_worker_launch(replicas, spec.cpu_threads, worker, cluster)


def mirrored_launch(replicas: int, cpu_threads: dict, worker: list[str], cluster: Cluster) -> Launch:
    """One process holding every replica (MirroredStrategy): RANK 0 of WORLD_SIZE replicas, the node's only process."""
    if cluster.multi_node:
        raise Unsupported(MIRRORED_MULTI_NODE.format(nnodes=cluster.nnodes))
    threads = threads_per_replica(cpu_threads or {}, 1)
    env = {"HARNESS_TF_STRATEGY": "mirrored", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(replicas),
           "LOCAL_WORLD_SIZE": "1", "OMP_NUM_THREADS": str(threads["intra_op"])}
    return Launch(processes=[LaunchProcess(list(worker), env, (0,))], local_ranks=(0,),
                  api=f"one process holding all {replicas} replicas (tf.distribute.MirroredStrategy)")


def cluster_workers(replicas: int, cluster: Cluster) -> tuple[list[str], str]:
    """The cluster's worker addresses, one per replica, node 0's first, and where they came from.

    One node: this machine's loopback, on free ports. Several: the `cluster.worker` list of the TF_CONFIG
    the user set for every node; Unsupported when it is missing or lists another number of workers.
    """
    if not cluster.multi_node:
        return [f"localhost:{port}" for port in free_ports(replicas)], "localhost, free ports"
    try:
        workers = list(json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker") or [])
    except (ValueError, AttributeError):
        workers = []
    if len(workers) != replicas:
        raise Unsupported(NO_TF_CONFIG.format(nnodes=cluster.nnodes, replicas=replicas)
                          + (f"; its cluster lists {len(workers)} worker(s)" if workers else ""))
    return workers, "TF_CONFIG's cluster from the environment"


def multi_worker_launch(replicas: int, cpu_threads: dict, worker: list[str], cluster: Cluster) -> Launch:
    """One worker process per replica of this node (MultiWorkerMirroredStrategy), each with its TF_CONFIG:
    the cluster's workers and its own task index, node_rank x local replicas + i."""
    local = replicas // cluster.nnodes
    workers, source = cluster_workers(replicas, cluster)
    threads = threads_per_replica(cpu_threads or {}, local)
    processes = []
    for i in range(local):
        rank = cluster.node_rank * local + i
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        processes.append(LaunchProcess(list(worker), {
            "TF_CONFIG": json.dumps(config), "HARNESS_TF_STRATEGY": "multi_worker", "RANK": str(rank),
            "LOCAL_RANK": str(i), "WORLD_SIZE": str(replicas), "LOCAL_WORLD_SIZE": str(local),
            "OMP_NUM_THREADS": str(threads["intra_op"])}, (rank,)))
    return Launch(processes=processes, local_ranks=tuple(p.ranks[0] for p in processes),
                  api=f"one worker process per replica, TF_CONFIG ({source}): {', '.join(workers)}")
