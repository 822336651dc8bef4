"""The tables of docs/tune.md: the race replayed on the stored H200 sweeps (20 orders each) against the
exhaustive answer, and its error rate on made-up configurations beside the exhaustive sweep's.

    python scripts/tune_tables.py [--trials 2000]      # prints Markdown; paste over the tables in docs/tune.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.results.compare import load_records
from harness.session.tune.replay import configurations as store_configurations
from harness.session.tune.replay import replay_store
from harness.session.tune.simulation import simulate

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
SWEEPS = ["h200-2026-12-02-frameworks-amp_bf16.db", "h200-2026-12-02-frameworks-amp_fp16.db",
          "h200-2026-12-02-frameworks-tf32.db", "h200-2026-12-03-frameworks-amp_bf16-compiled-eager.db",
          "h200-2026-12-03-frameworks-amp_bf16-graph-cuda_graph.db", "h200-2026-12-02-frameworks-gemm-bf16-fp16.db",
          "h200-2026-12-02-frameworks-gemm-fp32-tf32.db", "h200-2026-12-03-frameworks-gemm-fp32-tf32.db"]


def replay_table(seeds: int) -> list[str]:
    """A row per store: the race with the default prior, then with priors from the other stores' history."""
    rows = ["| store | configurations | answer equal (default prior / history) | processes: race, default prior "
            "(min-max) | race, history | exhaustive | run time: race, default prior | race, history | exhaustive "
            "| undecided pairs left (default prior) |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    totals = [0.0] * 5
    for name in SWEEPS:
        path = str(DATA / name)
        plain = replay_store(path, seeds=seeds)
        told = replay_store(path, seeds=seeds, history=[str(DATA / other) for other in SWEEPS if other != name])
        spent, spent_told = [r.processes for r in plain], [r.processes for r in told]
        minutes, minutes_told = (sum(r.run_time_s for r in rs) / len(rs) / 60 for rs in (plain, told))
        first = plain[0]
        undecided = sorted({u for r in plain for u in r.undecided})
        configurations = len(store_configurations(load_records(path))[0])
        rows.append(f"| {name.removesuffix('.db')} | {configurations} | {sum(r.equal for r in plain)}/{len(plain)} / "
                    f"{sum(r.equal for r in told)}/{len(told)} | {sum(spent) / len(spent):.1f} ({min(spent)}-{max(spent)})"
                    f" | {sum(spent_told) / len(spent_told):.1f} | {first.exhaustive} | {minutes:.1f} min "
                    f"| {minutes_told:.1f} min | {first.exhaustive_run_time_s / 60:.1f} min "
                    f"| {'; '.join(undecided) or 'none'} |")
        for i, v in enumerate((sum(spent) / len(spent), sum(spent_told) / len(spent_told), first.exhaustive,
                               minutes, minutes_told)):
            totals[i] += v
    rows.append(f"| all | | | {totals[0]:.1f} | {totals[1]:.1f} | {totals[2]:.0f} | {totals[3]:.1f} min "
                f"| {totals[4]:.1f} min | {sum(replay_store(str(DATA / n), seeds=1)[0].exhaustive_run_time_s for n in SWEEPS) / 60:.1f} min | |")
    return rows


def simulation_table(trials: int) -> list[str]:
    rows = ["| configurations | processes each (exhaustive) | trials | race wrong | exhaustive wrong "
            "| race and exhaustive picks > 2% apart | processes: race (mean) | exhaustive |",
            "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for configs, processes in ((6, 4), (6, 6), (12, 4)):
        r = simulate(trials, seed=1, configs=configs, processes=processes)
        rows.append(f"| {configs} | {processes} | {trials} | {r.race_wrong / trials:.1%} | "
                    f"{r.exhaustive_wrong / trials:.1%} | {r.disagree / trials:.1%} | {r.race_processes:.1f} "
                    f"| {r.exhaustive_processes} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="simulated frameworks per row")
    parser.add_argument("--seeds", type=int, default=20, help="orders of each store's processes")
    args = parser.parse_args()
    print("\n".join(replay_table(args.seeds)))
    print()
    print("\n".join(simulation_table(args.trials)))


if __name__ == "__main__":
    main()
