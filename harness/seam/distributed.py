"""Data-parallel runs (a workload's `replicas` > 1): the framework-free half, shared by every backend.

A backend that trains data-parallel says how its replicas are started (`Backend.launch`, with the
launcher beside the backend: backends/torch/launcher.py wraps the worker in torchrun,
backends/tensorflow/launcher.py starts one worker per replica with its TF_CONFIG) and how a replica
opens its device (`Backend.open_replica`); both build on the pieces here (Cluster, Launch, Replica).
The core keeps the rest: the timeout, the kill of every process it started and of every replica that
registered itself, which rank failed and why; the merge of the replicas' results into one record and
scaling efficiency are the parent's (harness.session.dataparallel). docs/distributed.md describes the
whole design.

The replica contract, the same for every launcher: a replica's environment has HARNESS_REPLICA=1
and torchrun's names RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE (torchrun sets them; a backend
that launches its own processes sets them too); replica r writes its result to RESULT.rank<r> and
registers its pid in RESULT.pids/<r>.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.errors import InputError
from harness.machine.variables import variables
from harness.timing.loop import BlockTime, Clock

#: Seconds the other processes of a launch get, after one of them failed, to write their results.
FAIL_FAST_GRACE_S = 5.0


@dataclass(frozen=True)
class Cluster:
    """Where this harness invocation sits among the nodes of a data-parallel run (`harness run --nnodes ...`).

    One node: everything on this machine (the default). Several: every node runs the same `harness
    run` with its own `node_rank`; `rdzv_endpoint` (HOST:PORT on node 0) is torchrun's rendezvous
    (its static rendezvous: node_rank 0 holds global rank 0), TensorFlow reads the cluster from
    TF_CONFIG. Node 0 stores each record; the other nodes store none.
    """

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    #: the run's place in the plan (the runner sets it per run): the same on every node
    run_index: int = 0

    @property
    def multi_node(self) -> bool:
        """Whether the run spans several nodes."""
        return self.nnodes > 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Cluster":
        """The cluster `harness run --nnodes N --node-rank K --rdzv-endpoint H:P --rdzv-id ID` asked for
        (kept in HARNESS_NNODES, HARNESS_NODE_RANK, HARNESS_RDZV_ENDPOINT, HARNESS_RDZV_ID); InputError
        (exit 2) for a combination that cannot work."""

        given = variables(env)
        nnodes, node_rank = given.nnodes, given.node_rank
        cluster = cls(nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=given.rdzv_endpoint, rdzv_id=given.rdzv_id)
        if nnodes < 1 or not 0 <= node_rank < nnodes:
            raise InputError(f"--node-rank {node_rank}: expected 0..{nnodes - 1} with --nnodes {nnodes}", field="--node-rank")
        if nnodes > 1:
            try:
                cluster.endpoint()
            except ValueError as exc:
                raise InputError(f"{exc}; --nnodes {nnodes} needs it", field="--rdzv-endpoint") from None
        return cluster

    def endpoint(self) -> tuple[str, int]:
        """(host, port) of the rendezvous; ValueError when absent or malformed."""
        text = self.rdzv_endpoint or ""
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--rdzv-endpoint {text!r}: expected HOST:PORT (node 0's address)")
        return host, int(port)


@dataclass
class LaunchProcess:
    """One process the runner starts for a data-parallel run: its argv and the variables added to its environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    #: which global ranks this process is (a torchrun process: all of this node's)
    ranks: tuple[int, ...] = ()


@dataclass
class Launch:
    """How a backend starts the replicas of one run on this node."""

    processes: list[LaunchProcess]
    #: the launcher, for the record (`torchrun --nproc-per-node 2 ...`, `one process per worker, TF_CONFIG`)
    api: str
    #: reads the launcher's log for the ranks that died and why ({rank: "exit code -9 (SIGKILL)"}); optional
    failures_from_log: Callable[[str], dict[int, str]] | None = None
    #: ranks of this node
    local_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Replica:
    """Which replica this worker process is, read from its environment (None outside a data-parallel run)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Replica | None":
        """This process's replica, from the replica contract's variables; None outside a data-parallel run."""
        given = variables(env)
        if not given.replica:
            return None
        return cls(rank=given.rank, local_rank=given.local_rank, world_size=given.world_size,
                   local_world_size=given.world_size if given.local_world_size is None else given.local_world_size)


def rank_result_path(result_path: str | os.PathLike, rank: int) -> Path:
    """Where replica `rank` writes its result: RESULT.rank<r>."""
    return Path(f"{result_path}.rank{rank}")


def pid_dir(result_path: str | os.PathLike) -> Path:
    """Where the replicas of a run register their pids: RESULT.pids/."""
    return Path(f"{result_path}.pids")


def register_pid(result_path: str | os.PathLike, rank: int) -> None:
    """Note this replica's pid where the runner finds it (it kills any replica still alive after the run)."""
    directory = pid_dir(result_path)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / str(rank)).write_text(str(os.getpid()), encoding="utf-8")


def replica_device(device: str, local_rank: int) -> str:
    """The neutral device of one replica: `cuda:K` with local rank i is `cuda:K+i`; `cpu` and `auto` stay
    (`auto` is offset once the backend has resolved it)."""
    if device.startswith("cuda:"):
        return f"cuda:{int(device.split(':', 1)[1]) + local_rank}"
    return device


def threads_per_replica(cpu_threads: dict, local_replicas: int) -> dict:
    """CPU thread pools of one replica: the scenario's where set, else the usable cores shared out
    among this node's replicas (R processes each taking every core would only fight)."""
    out = dict(cpu_threads or {})
    if not out.get("intra_op"):
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        out["intra_op"] = max(1, cores // max(1, local_replicas))
    return out


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` TCP ports free on this machine now (bound together, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return str(code)


def describe_exit(returncode: int | None) -> str:
    """`exit code 1`, `killed by signal SIGKILL (the OS out-of-memory killer sends SIGKILL)`."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        hint = " (the OS out-of-memory killer sends SIGKILL)" if -returncode == signal.SIGKILL else ""
        return f"killed by signal {_signal_name(-returncode)}{hint}"
    return f"exit code {returncode}"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited; only its parent's wait is missing
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def kill_registered(result_path: str | os.PathLike) -> list[int]:
    """SIGKILL every registered replica still alive (a launcher may start its workers in sessions of their
    own, out of reach of its process group). Only a process whose command line names this run's result
    file is touched, so a reused pid is left alone. Returns the pids killed."""
    killed = []
    directory = pid_dir(result_path)
    if not directory.is_dir():
        return killed
    marker = str(result_path).encode()
    for entry in directory.iterdir():
        try:
            pid = int(entry.read_text(encoding="utf-8").strip())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker not in fh.read():
                    continue
        except (OSError, ValueError):
            continue
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


class BarrierClock:
    """A device clock whose every read waits for all replicas first (a barrier of the framework's process
    group): rank 0's block time then runs from the moment the last replica is ready to the moment the
    slowest one has finished, so the global rate covers the slowest replica."""

    def __init__(self, inner: Clock, barrier: Callable[[], None]):
        self._inner = inner
        self._barrier = barrier

    def sync(self) -> None:
        """Wait for this device, then for every replica."""
        self._inner.sync()
        self._barrier()

    def start(self) -> Any:
        """Start the inner clock once every replica is ready."""
        self._inner.sync()
        self._barrier()
        return self._inner.start()

    def stop(self, token: Any) -> BlockTime:
        """Read the inner clock once every replica has finished."""
        self._inner.sync()
        self._barrier()
        return self._inner.stop(token)


#: Environment variables of collective libraries worth keeping with a data-parallel record.
COLLECTIVE_VARIABLES = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "NCCL_ALGO",
                        "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG",
                        "GLOO_SOCKET_IFNAME", "TF_CONFIG")


def collective_env() -> dict:
    """The collective libraries' variables set in this environment (COLLECTIVE_VARIABLES), for the record."""
    return {name: os.environ[name] for name in COLLECTIVE_VARIABLES if name in os.environ}
