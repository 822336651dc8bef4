#!/usr/bin/env python3
"""How far `--executor slurm` into PostgreSQL goes, measured on this machine with the real services
(scripts/services.sh) and a workload that imports no framework (tests/noop_plugin.py), so that a run costs
harness's overhead, not a framework's start-up. Used for the figures in docs/distributed.md, "How far it goes".

    python scripts/cluster_scale.py                       # every part, docs/data/cluster-scale-DATE.json
    python scripts/cluster_scale.py --parts queue,store   # some parts, merged into the same file

Parts:
  e2e    RUNS runs end to end through `harness run --executor slurm --store postgresql://...`: the
         submit-to-stored wall time, the database's rows and size, the submitter's peak RSS, squeue and sacct
         calls per minute (counted by a logging shim put first on the submitter's PATH);
  held   a QUEUED-run session submitted through `harness run` with its jobs held (none runs): what the
         submitter does where Slurm refuses part of it, and what it leaves queued;
  queue  QUEUED tasks submitted held (`sbatch --hold`) and polled as the executor polls (its own
         `queue.poll`), then cancelled; what Slurm refuses on the way (MaxArraySize, MaxJobCount);
  store  the plan of a RECORDS-run session (its size, as the store keeps it and reads it back), then RECORDS
         records written one transaction each (as `harness run` writes) and read back, through the store and
         through the session's journal, a few passes, each with the load average beside it;
  large  a LARGE-run session's plan (built, stored, read back) and one journal add with LARGE results held;
  journal  journal adds (a result each, appended) with RECORDS and LARGE results held, in a session of as many
         planned runs.

Every database it makes (scale_*) is dropped at its end; the server is HARNESS_TEST_POSTGRES (as
`scripts/services.sh --env` prints it) or the script's default.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from scale_e2e import e2e, submitted_held  # noqa: E402 - after the checkout is on the path
from scale_growth import journal_growth, large_session, queued, store_passes  # noqa: E402
from scale_machine import machine  # noqa: E402

from tests.services import server_url  # noqa: E402

PARTS = ("e2e", "held", "queue", "store", "large", "journal")


def _merged(out: Path, figures: dict) -> dict:
    """The figures over those already in `out`: a part measured again keeps its earlier measurements, each with
    its own machine note, under `earlier` (rates move with the machine's load: every pass is kept)."""
    try:
        before = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = {}
    merged = dict(before)
    for part, found in figures.items():
        if part in before:
            earlier = before[part].pop("earlier", [])
            found = {**found, "earlier": [*earlier, before[part]]}
        merged[part] = found
    return merged


def main() -> None:
    """Measure the parts asked for and write them, merged, to the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--runs", type=int, default=1000, help="runs of the end-to-end session")
    parser.add_argument("--queued", type=int, default=10_000, help="tasks queued held in Slurm")
    parser.add_argument("--records", type=int, default=10_000, help="records through the store and the journal")
    parser.add_argument("--large", type=int, default=100_000, help="runs of the session whose plan and journal "
                        "alone are measured")
    parser.add_argument("--passes", type=int, default=3, help="passes of each write measurement")
    parser.add_argument("--out", default=str(ROOT / "docs" / "data" / f"cluster-scale-{datetime.date.today()}.json"))
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (expected some of {', '.join(PARTS)})")
    url = server_url()
    figures: dict = {}
    for part in parts:
        started = machine()
        if part == "e2e":
            found = e2e(url, args.runs)
        elif part == "held":
            found = submitted_held(url, args.queued)
        elif part == "queue":
            found = queued(args.queued)
        elif part == "store":
            found = store_passes(url, args.records, args.passes)
        elif part == "journal":
            found = journal_growth(url, [args.records, args.large], 5)
        else:
            found = large_session(url, args.large)
        figures[part] = {"command": subprocess.list2cmdline([Path(sys.argv[0]).name, *sys.argv[1:]]),
                         "machine_at_start": started, "machine_at_end": machine(), **found}
        print(json.dumps({part: figures[part]}, indent=1), flush=True)
    out = Path(args.out)
    out.write_text(json.dumps(_merged(out, figures), indent=1) + "\n", encoding="utf-8")
    print(f"written: {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
