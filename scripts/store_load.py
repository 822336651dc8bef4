#!/usr/bin/env python3
"""How fast a results store takes records: WRITERS processes each add RECORDS records of a realistic size, one
transaction each, as `harness run` does; prints records per second in all, each add's latency (median, p99) and
the stored size per record. Several writers at once; scripts/cluster_scale.py measures one session's writes
(with this script's record) for docs/distributed.md.

    python scripts/store_load.py postgresql://USER@HOST/DB --writers 8 --records 2000
    python scripts/store_load.py /tmp/load.db --writers 1

The database should be one made for the test: the records it adds stay there.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
import uuid

from harness.machine import env as env_mod
from harness.results.record import Result, utc_now
from harness.results.store import open_store, parse_location
from harness.results.store.schema import stored_record


def sample_record(session_id: str) -> Result:
    """A record the size of a real one: 30 samples, the environment, figures, a Slurm note."""
    record = Result(run_id=uuid.uuid4().hex, session_id=session_id, run_key=uuid.uuid4().hex[:16], scenario="load",
                    workload="resnet50", backend="torch", framework_version="2.14.1", device="cuda:0",
                    device_name="NVIDIA RTX A6000", params={"batch_size": 64, "precision": "amp_bf16"},
                    status="ok", metric="throughput", unit="images/s", median=1234.5, iqr=3.2, ci_low=1230.0,
                    ci_high=1240.0, cv=0.01, samples=[1234.5 + i / 10 for i in range(30)], step_time_s=0.05,
                    first_step_s=2.1, peak_allocated_bytes=8 << 30, env=env_mod.capture(), started_at=utc_now(),
                    duration_s=42.0, phases_s={"open_device": 0.3, "prepare": 2.0, "steps": 38.0, "process": 1.7})
    return record.merged({"slurm": {"job_id": "123456_7", "state": "COMPLETED", "node": "gpu-node-17",
                                    "gpus": "0", "partition": "a6000"}})


def _writer(args: tuple[str, int, int]) -> list[float]:
    target, count, index = args
    session_id = f"load-{index}-{uuid.uuid4().hex[:8]}"
    template = sample_record(session_id)
    latencies = []
    with open_store(target) as store:
        store.begin_session(session_id, [], scenario_path=None, command="store_load")
        for _ in range(count):
            record = template.updated(run_id=uuid.uuid4().hex, started_at=utc_now())
            start = time.perf_counter()
            store.add(record)
            latencies.append(time.perf_counter() - start)
        store.end_session(session_id, "finished")
    return latencies


def _stored_size(target: str) -> int | None:
    if not parse_location(target).url:
        return None
    with open_store(target, readonly=True) as store:
        return int(store._read("SELECT pg_total_relation_size('results')")[0][0])


def main() -> None:
    """Run the load and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--records", type=int, default=2000, help="records per writer")
    args = parser.parse_args()
    open_store(args.store).close()  # the tables, before the writers race for them
    before = _stored_size(args.store)
    start = time.perf_counter()
    with multiprocessing.Pool(args.writers) as pool:
        latencies = [x for part in pool.map(_writer, [(args.store, args.records, i) for i in range(args.writers)])
                     for x in part]
    wall = time.perf_counter() - start
    after = _stored_size(args.store)
    latencies.sort()
    print(json.dumps({
        "store": parse_location(args.store).scheme, "writers": args.writers,
        "records": len(latencies), "records_per_s": round(len(latencies) / wall, 1),
        "latency_ms_median": round(statistics.median(latencies) * 1000, 2),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        "record_json_bytes": len(json.dumps(stored_record(sample_record("x")))),
        "stored_bytes_per_record": round((after - before) / len(latencies)) if after is not None else None,
    }))


if __name__ == "__main__":
    main()
