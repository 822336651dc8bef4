"""Slurm workers get the compilation caches local workers get, against the real single-node Slurm: a cold process
starts from an empty cache of its own (the framework's and the CUDA driver's, CUDA_CACHE_PATH), `compile_cache:
warm` shares one per configuration once a job has filled it, the record says which as a local one does, and
the session removes them."""

import os
import subprocess
import sys

import pytest
import yaml

from harness.results.store import open_store
from tests import services

pytestmark = pytest.mark.xdist_group("slurm")
slurm = services.slurm


def _run(tmp_path, cache: str, processes: int):
    path = tmp_path / f"{cache}.yaml"
    path.write_text(yaml.safe_dump({
        "name": cache, "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": processes,
                    "compile_cache": cache},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": [1, 2]},
        "options": {"fake": {"action": "ok"}},
    }), encoding="utf-8")
    config = tmp_path / "slurm.yaml"
    config.write_text("parallel: 1\npoll_s: 0.3\n", encoding="utf-8")  # one job at a time: an order to count on
    db = tmp_path / f"{cache}.db"
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--executor", "slurm", "--slurm-config",
                           str(config), "--store", str(db), "-q"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "CUDA_CACHE_PATH": str(tmp_path / "users-own")})
    assert done.returncode == 0, done.stderr
    with open_store(db, readonly=True) as store:
        return store.results()


def test_cold_jobs_each_start_from_empty_caches_of_their_own(tmp_path, fake_backend, slurm):
    rows = _run(tmp_path, "cold", 1)
    assert len(rows) == 2 and {r.compile_cache for r in rows} == {"cold"}
    assert not any(r.api["cache_entry_found"] for r in rows) and len({r.api["cache"] for r in rows}) == 2
    drivers = [r.env.variables["CUDA_CACHE_PATH"] for r in rows]
    assert len(set(drivers)) == 2 and not any(d.startswith(str(tmp_path / "users-own")) for d in drivers)
    assert all(os.path.dirname(d) == r.api["cache"] for r, d in zip(rows, drivers))
    assert not any(os.path.exists(r.api["cache"]) for r in rows)  # removed with its run


def test_warm_jobs_share_a_cache_per_configuration_and_say_so(tmp_path, fake_backend, slurm):
    rows = _run(tmp_path, "warm", 2)
    by_key: dict = {}
    for r in sorted(rows, key=lambda r: r.replicate):
        by_key.setdefault(r.run_key, []).append(r)
    assert len(by_key) == 2
    for runs in by_key.values():
        assert [r.compile_cache for r in runs] == ["cold", "warm"]
        assert [r.api["cache_entry_found"] for r in runs] == [False, True]
    caches = {r.api["cache"] for r in rows}
    assert len(caches) == 2 and not any(os.path.exists(c) for c in caches)  # the session removed them
