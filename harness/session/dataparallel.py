"""A data-parallel run's one record, made by the parent from its replicas' result files.

Each replica of a run writes the record fields it knows to RESULT.rank<r> (harness.seam.distributed's
replica contract); the runner reads them here, merges them into the run's `Result` (rank 0's figures,
every rank's memory and inputs, the root-cause status when a replica failed) and, once the run is
stored, relates its rate to the same configuration's 1-replica rate (scaling efficiency).
"""

from __future__ import annotations

import json
import os

from harness.results.record import Result
from harness.seam.distributed import rank_result_path

#: Statuses that say what went wrong in a replica itself, before a secondary failure of its peers.
_ROOT_CAUSE_ORDER = ("oom", "unsupported", "diverged", "timeout", "failed")


def read_rank_results(result_path: str | os.PathLike, ranks) -> dict[int, dict]:
    """rank -> the record fields that replica wrote, for each rank whose result file is there and readable."""
    out = {}
    for rank in ranks:
        path = rank_result_path(result_path, rank)
        if path.exists():
            try:
                out[rank] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
    return out


def _rank_entry(rank: int, written: dict | None, died: dict[int, str]) -> dict:
    """One rank's line in distributed.ranks: its status, device, memory and inputs, or how it died."""
    entry = {"rank": rank, "status": written.get("status") if written else None}
    if written:
        checks = written.get("checks") or {}
        entry.update(device=written.get("device"), peak_allocated_bytes=written.get("peak_allocated_bytes"),
                     host_peak_rss_bytes=written.get("host_peak_rss_bytes"),
                     inputs_fingerprint=checks.get("inputs_fingerprint"), loss_last=checks.get("loss_last"),
                     parameters_sum=checks.get("parameters_sum"))
        if written.get("status") != "ok" and written.get("error"):
            entry["error"] = str(written["error"])[:500]
    elif rank in died:
        entry["error"] = died[rank]
    return entry


def _problems(results: dict[int, dict], local_ranks, died: dict[int, str], timed_out: bool) -> list[tuple]:
    """(rank, status, error, oom evidence) of every rank that did not end ok."""
    problems = []
    for rank in sorted(local_ranks):
        written = results.get(rank)
        if written is None:
            how = died.get(rank) or ("stopped at the timeout" if timed_out else "left without a result")
            problems.append((rank, "timeout" if timed_out and rank not in died else "failed",
                             f"replica rank {rank} {how}", None))
        elif written.get("status") not in ("ok", None):
            problems.append((rank, written["status"], f"replica rank {rank}: {written.get('error') or written['status']}",
                             written.get("oom_evidence")))
    return problems


def _root_cause(problems: list[tuple], results: dict[int, dict], died: dict[int, str]) -> tuple:
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


def merge(record: Result, results: dict[int, dict], local_ranks, world_size: int, died: dict[int, str],
          *, timed_out: bool, node_rank: int = 0) -> Result:
    """One record from the replicas' results: rank 0's figures, the other ranks' memory, the root-cause status.

    `results`: rank -> the fields it wrote (read_rank_results); `died`: ranks that left without a result, with
    how (from the launcher). Returns the merged record; `record` itself is left as it was.
    """
    own = results.get(0)
    merged = record.merged({k: v for k, v in own.items() if k != "distributed_replica"}) if own else \
        record.merged({})
    distributed = dict(merged.distributed or {})
    distributed.update((own or {}).get("distributed_replica") or {})
    distributed["ranks"] = [_rank_entry(rank, results.get(rank), died) for rank in sorted(local_ranks)]
    distributed["peaks_of"] = "every rank of node 0 (distributed.ranks); peak_allocated_bytes is rank 0's"
    merged = merged.updated(distributed=distributed)

    problems = _problems(results, local_ranks, died, timed_out)
    if not problems:  # rank 0's status, every rank being fine
        return merged.updated(status="ok") if own is None and node_rank != 0 else merged
    cause = _root_cause(problems, results, died)
    rank, status, error, evidence = cause
    distributed = {**distributed, "failed_rank": rank}
    others = [p[2] for p in problems if p is not cause]
    if others:
        distributed["other_failures"] = [o[:300] for o in others]
    merged = merged.updated(status=status, error=error[:2000], distributed=distributed)
    return merged.merged({"oom_evidence": f"replica rank {rank}: {evidence}"}) if evidence else merged


def scaling_efficiency(rate: float | None, replicas: int, rate_one: float | None) -> float | None:
    """Global rate at R replicas / (R x the rate of the same configuration at 1 replica)."""
    if not rate or not rate_one or replicas < 1:
        return None
    return rate / (replicas * rate_one)
