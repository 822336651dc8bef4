"""A data-parallel run, as the parent launches it and makes its one record from its replicas' result files.

The backend's launch (`Backend.launch`) says which processes start this node's replicas; the parent holds the
host's timing lock for them from the launch to the last replica's exit. Each replica of a run writes the record
fields it knows to RESULT.rank<r> (harness.seam.distributed's replica contract); the parent reads them here,
merges them into the run's `Result` (rank 0's figures, every rank's memory and inputs, the root-cause status
when a replica failed) and relates its rate to the same configuration's 1-replica rate in the store (scaling
efficiency).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from typing import Callable, Iterator

from harness.results.parts import Distributed, RankOutcome, ScalingBaseline
from harness.results.record import Result
from harness.seam import distributed as dp
from harness.seam.backend import Backend
from harness.seam.distributed import rank_result_path
from harness.seam.runspec import RunSpec
from harness.session.plan import one_replica_key
from harness.session.worker_process import RunFiles, log_tail
from harness.timing.stats import median
from harness.worker.hostlock import HELD_VARIABLE, session_of, timing_lock
from harness.workloads import WORKLOADS

#: Statuses that say what went wrong in a replica itself, before a secondary failure of its peers.
_ROOT_CAUSE_ORDER = ("oom", "unsupported", "diverged", "timeout", "failed")


def read_rank_results(result_path: str | os.PathLike, ranks) -> dict[int, Result]:
    """rank -> the record fields that replica wrote, for each rank whose result file is there and readable."""
    out = {}
    for rank in ranks:
        path = rank_result_path(result_path, rank)
        if path.exists():
            try:
                out[rank] = Result.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):  # RecordError too: a file that holds no record
                continue
    return out


def _rank_entry(rank: int, written: Result | None, died: dict[int, str]) -> RankOutcome:
    """One rank's line in distributed.ranks: its status, device, memory and inputs, or how it died."""
    if written is None:
        return RankOutcome(rank=rank, status=None, **({"error": died[rank]} if rank in died else {}))
    checks = written.checks
    entry = RankOutcome(rank=rank, status=written.status, device=written.device,
                        peak_allocated_bytes=written.peak_allocated_bytes,
                        host_peak_rss_bytes=written.host_peak_rss_bytes, inputs_fingerprint=checks.inputs_fingerprint,
                        loss_last=checks.loss_last, parameters_sum=checks.parameters_sum)
    if written.status != "ok" and written.error:
        entry = entry.updated(error=str(written.error)[:500])
    return entry


def _problems(results: dict[int, Result], local_ranks, died: dict[int, str], timed_out: bool) -> list[tuple]:
    """(rank, status, error, oom evidence) of every rank that did not end ok."""
    problems = []
    for rank in sorted(local_ranks):
        written = results[rank] if rank in results else None
        if written is None:
            how = died[rank] if rank in died else ("stopped at the timeout" if timed_out else "left without a result")
            problems.append((rank, "timeout" if timed_out and rank not in died else "failed",
                             f"replica rank {rank} {how}", None))
        elif written.status not in ("ok", None):
            problems.append((rank, written.status, f"replica rank {rank}: {written.error or written.status}",
                             written.note("oom_evidence")))
    return problems


def _root_cause(problems: list[tuple], results: dict[int, Result], died: dict[int, str]) -> tuple:
    """The problem that caused the others: a replica out of memory, unsupported or diverged; else one that left
    without a result (killed, crashed) before a peer that wrote its error (its collective broke because of it);
    else the worst error a replica wrote; a peer that was stopped with SIGTERM (harness stops the others once
    one has failed) only where nothing else went wrong."""
    problems.sort(key=lambda p: (_ROOT_CAUSE_ORDER.index(p[1]) if p[1] in _ROOT_CAUSE_ORDER else 9, p[0]))
    if problems[0][1] in ("oom", "unsupported", "diverged"):
        return problems[0]
    order = list(died)

    def tier(problem: tuple) -> tuple[int, int]:  # crashed (first to die first), wrote its error, stopped
        rank = problem[0]
        if rank not in died or rank in results:
            return 1, 0
        return (2, 0) if "SIGTERM" in died[rank] else (0, order.index(rank))

    return min(problems, key=tier)  # the first of a tier in the order above: the worst status, then the rank


def merge(record: Result, results: dict[int, Result], local_ranks, world_size: int, died: dict[int, str],
          *, timed_out: bool, node_rank: int = 0) -> Result:
    """One record from the replicas' results: rank 0's figures, the other ranks' memory, the root-cause status.

    `results`: rank -> what it wrote (read_rank_results); `died`: ranks that left without a result, with
    how (from the launcher). Returns the merged record; `record` itself is left as it was.
    """
    own = results[0] if 0 in results else None
    merged = record.merged({k: v for k, v in own.to_dict().items() if k != "distributed_replica"}) if own else \
        record.merged({})
    replica = Distributed.of(own.note("distributed_replica")) if own else Distributed()
    distributed = merged.distributed.updated(**replica.to_dict()).updated(
        ranks=[_rank_entry(rank, results[rank] if rank in results else None, died) for rank in sorted(local_ranks)],
        peaks_of="every rank of node 0 (distributed.ranks); peak_allocated_bytes is rank 0's")
    merged = merged.updated(distributed=distributed)

    problems = _problems(results, local_ranks, died, timed_out)
    if not problems:  # rank 0's status, every rank being fine
        return merged.updated(status="ok") if own is None and node_rank != 0 else merged
    cause = _root_cause(problems, results, died)
    rank, status, error, evidence = cause
    others = [p[2] for p in problems if p is not cause]
    distributed = distributed.updated(failed_rank=rank, **({"other_failures": [o[:300] for o in others]}
                                                            if others else {}))
    merged = merged.updated(status=status, error=error[:2000], distributed=distributed)
    return merged.with_note("oom_evidence", f"replica rank {rank}: {evidence}") if evidence else merged


def scaling_efficiency(rate: float | None, replicas: int, rate_one: float | None) -> float | None:
    """Global rate at R replicas / (R x the rate of the same configuration at 1 replica)."""
    if not rate or not rate_one or replicas < 1:
        return None
    return rate / (replicas * rate_one)


def replicas_of(spec: RunSpec) -> int:
    """How many data-parallel replicas a run has (1 for a plain run)."""
    workload = WORKLOADS.get(spec.workload)
    return workload.replicas(spec.params) if workload else 1


def cluster_for_run(cluster: dp.Cluster, spec: RunSpec, index: int) -> dp.Cluster:
    """The cluster with a rendezvous id of the plan's run `index`: every node runs the same plan in the same
    order, so (run_key, replicate, index in the plan) names the same run on each."""
    base = cluster.rdzv_id or "harness"
    return replace(cluster, rdzv_id=f"{base}-{spec.run_key}-{spec.replicate}-{index}", run_index=index)


def launch_commands(spec: RunSpec, backend: Backend, files: RunFiles, env: dict, cluster: dp.Cluster,
                    index: int) -> tuple[dp.Launch | None, list[tuple[list[str], dict]]]:
    """(launch, [(argv, environment)]): one worker for a plain run; the backend's launch of every local replica
    for a data-parallel one, the plan's run `index` (Unsupported or ValueError where it cannot start them)."""
    worker = [sys.executable, "-m", "harness.worker", str(files.spec), str(files.result)]
    if replicas_of(spec) == 1:
        return None, [(worker, env)]
    launch = backend.launch(spec, worker, cluster_for_run(cluster, spec, index))
    return launch, [(p.argv, {**env, **p.env, "HARNESS_REPLICA": "1", HELD_VARIABLE: "1"}) for p in launch.processes]


@contextlib.contextmanager
def replicas_lock(spec: RunSpec, launch: dp.Launch | None, cluster: dp.Cluster,
                  report: Callable[..., None]) -> Iterator[dict | None]:
    """The host's timing lock for a data-parallel run, held here from its launch to its last replica's exit
    (its replicas do not take it: HELD_VARIABLE): ranks that waited for the lock inside a collective could
    outlast the collective's timeout. Yields the record's `env.isolation`; None for a plain run (its worker
    takes the lock). Not taken over several nodes: each node's lock is its own, and two such sessions each
    holding one node's lock would wait for each other for ever; the scheduler keeps them apart. `report(phase,
    **figures)` hears the wait's `host_lock` events."""
    if launch is None:
        yield None
        return
    if cluster.multi_node:
        yield {"mode": "not_taken", "reason": "a run over several nodes: keep such sessions apart with the "
                                              "scheduler (Slurm --exclusive)"}
        return
    who = {"session": spec.session_id, "run": f"{spec.backend} {spec.workload} on {spec.device} (data-parallel)",
           **session_of(os.getpid())}
    with timing_lock(spec.measure.share_host, who, report) as isolation:
        yield isolation


def layout(spec: RunSpec, launch: dp.Launch, cluster: dp.Cluster) -> Distributed:
    """A data-parallel record's `distributed` before its replicas run: the launcher and the layout."""
    replicas = replicas_of(spec)
    return Distributed(launcher=launch.api, nnodes=cluster.nnodes, node_rank=cluster.node_rank, world_size=replicas,
                       global_batch=int(spec.param("batch_size") or 0) * replicas)


def proc_ranks(launch: dp.Launch, proc, procs: list) -> tuple[int, ...]:
    """The ranks one started process is (a torchrun process: every rank of this node)."""
    index = procs.index(proc)
    return launch.processes[index].ranks if index < len(launch.processes) else ()


def _died(launch: dp.Launch, procs: list[subprocess.Popen], files: RunFiles, results: dict) -> dict[int, str]:
    """rank -> how it left, for the ranks that wrote no result: from the launcher's log, else the exit code."""
    died: dict[int, str] = {}
    if launch.failures_from_log is not None:
        try:
            died.update(launch.failures_from_log(log_tail(files.log, 200_000)))
        except Exception:  # noqa: BLE001 - evidence is a courtesy; the status stands without it
            pass
    for proc in procs:
        for rank in proc_ranks(launch, proc, procs):
            if rank not in results and rank not in died and proc.returncode not in (0, None):
                died[rank] = dp.describe_exit(proc.returncode)
    return died


def record_of_replicas(result: Result, spec: RunSpec, launch: dp.Launch, procs: list[subprocess.Popen],
                       files: RunFiles, timed_out: bool, leftovers: list[int], node_rank: int) -> Result:
    """One record from the replicas' result files, with the failed rank and its evidence as the status."""
    ranks = launch.local_ranks or tuple(r for p in launch.processes for r in p.ranks)
    results = read_rank_results(files.result, ranks)
    result = merge(result, results, ranks, replicas_of(spec), _died(launch, procs, files, results),
                   timed_out=timed_out, node_rank=node_rank)
    if timed_out and result.status == "ok":
        result = result.with_warning(f"the replicas wrote their results but had not all exited after "
                                     f"{spec.timeout_s:g} s; they were stopped and the results kept")
    elif timed_out and result.status in ("failed", "timeout"):
        result = result.updated(status="timeout", error=(
            f"no result within {spec.timeout_s:g} s (measure.timeout_s / --timeout); every replica "
            f"stopped ({result.error})"))
    if leftovers:
        result = result.updated(distributed=result.distributed.updated(killed_after_exit=len(leftovers)))
    return result


def with_scaling_efficiency(record: Result, store) -> Result:
    """scaling_efficiency of an ok data-parallel record, against the median of the same configuration's
    1-replica records in the store (none there yet: left None; compare and report compute it later)."""
    replicas = int(record.replicas or 1)
    if replicas < 2 or record.status != "ok" or not record.median:
        return record
    key = one_replica_key(record.scenario, record.workload, record.backend,
                          record.device_requested or record.device, record.params, record.options or None)
    if key is None:
        return record
    try:
        ones = store.ok_medians(key)
    except Exception:  # noqa: BLE001 - a figure the store cannot give is computed later by compare
        return record
    if ones:
        record = record.updated(
            scaling_efficiency=scaling_efficiency(record.median, replicas, median(ones)),
            distributed=record.distributed.updated(
                scaling_baseline=ScalingBaseline(run_key=key, processes=len(ones), median=median(ones))))
    return record
