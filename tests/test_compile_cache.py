"""Compilation caches: a cold process starts from an empty cache of its own, `compile_cache: warm` shares one
per configuration within a session, the session removes them, and first-step comparisons never mix the two."""

import os
import subprocess
import sys

import numpy as np
import pytest

from harness.results.compare import compare
from harness.results.store import open_store
from harness.session.app import SessionRequest, prepare_session, run_session
from tests.test_verdicts import process_record


def _scenario(write_scenario, cache: str) -> str:
    return write_scenario({
        "name": "cache", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": 3,
                    "compile_cache": cache},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": [1, 2]},
        "options": {"fake": {"action": "ok"}},
    })


def _session(tmp_path, write_scenario, cache):
    db = str(tmp_path / f"{cache}.db")
    finished = run_session(prepare_session(SessionRequest(scenario_file=_scenario(write_scenario, cache),
                                                          store_path=db)))
    assert finished.exit_code == 0
    with open_store(db, readonly=True) as store:
        return store.results()


def test_cold_processes_each_start_from_an_empty_cache_of_their_own(tmp_path, fake_backend, write_scenario):
    rows = _session(tmp_path, write_scenario, "cold")
    assert len(rows) == 6 and {r.compile_cache for r in rows} == {"cold"}
    assert not any(r.api["cache_entry_found"] for r in rows)
    assert len({r.api["cache"] for r in rows}) == 6
    assert not any(os.path.exists(r.api["cache"]) for r in rows)  # removed with its run


def test_warm_shares_one_cache_per_configuration_after_its_first_process(tmp_path, fake_backend, write_scenario):
    rows = _session(tmp_path, write_scenario, "warm")
    by_key: dict = {}
    for r in sorted(rows, key=lambda r: r.replicate):
        by_key.setdefault(r.run_key, []).append(r)
    assert len(by_key) == 2
    for runs in by_key.values():
        assert [r.compile_cache for r in runs] == ["cold", "warm", "warm"]
        assert [r.api["cache_entry_found"] for r in runs] == [False, True, True]
        assert len({r.api["cache"] for r in runs}) == 1
    caches = {r.api["cache"] for r in rows}
    assert len(caches) == 2 and not any(os.path.exists(c) for c in caches)  # the session removed them
    assert not os.path.exists(os.path.dirname(next(iter(caches))))


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_the_cuda_drivers_cache_is_each_processs_own_in_either_mode(tmp_path, fake_backend, write_scenario,
                                                                    monkeypatch, cache):
    # kernels the driver compiled from PTX land in ~/.nv/ComputeCache by default, kept across processes and
    # sessions: a later process's first step would reuse them. Each process gets an empty one of its own
    monkeypatch.setenv("CUDA_CACHE_PATH", str(tmp_path / "users-own"))
    rows = _session(tmp_path, write_scenario, cache)
    drivers = [r.env.variable("CUDA_CACHE_PATH") for r in rows]
    assert len(set(drivers)) == 6 and not any(d.startswith(str(tmp_path)) for d in drivers)
    assert not any(os.path.exists(os.path.dirname(d)) for d in drivers)  # removed with its run
    if cache == "warm":  # the framework's cache is shared, the driver's is not
        assert len({r.api["cache"] for r in rows}) == 2
        assert not any(d.startswith(r.api["cache"]) for r, d in zip(rows, drivers))


def test_a_framework_without_a_cache_still_gets_a_driver_cache_of_its_own(tmp_path, fake_backend, write_scenario,
                                                                          monkeypatch):
    from tests.fake_backend import FakeBackend

    monkeypatch.setattr(FakeBackend, "compile_cache_env", lambda self, directory: {})
    rows = _session(tmp_path, write_scenario, "warm")
    assert {r.compile_cache for r in rows} == {"none"} and not any("cache" in r.api for r in rows)
    drivers = {r.env.variable("CUDA_CACHE_PATH") for r in rows}
    assert len(drivers) == 6 and not any(os.path.exists(d) for d in drivers)


def test_first_step_comparisons_leave_warm_processes_out():
    rng = np.random.default_rng(0)
    records = []
    for backend, first in (("torch", 40.0), ("tensorflow", 45.0)):
        for i in range(5):
            record = process_record(100.0, backend, rng=rng)
            record.update(first_step_s=first * (1 + 0.01 * rng.standard_normal()) if i < 4 else 5.0,
                          compile_cache="cold" if i < 4 else "warm")
            records.append(record)
    row = compare(records, ["backend"], metric="first_step_s").iloc[0]
    assert row["baseline_runs"] == 4 and row["value_runs"] == 4  # the warm fifth left out on each side
    assert row["ratio"] == pytest.approx(45 / 40, rel=0.03)
    assert compare(records, ["backend"]).iloc[0]["baseline_runs"] == 5  # every process for the step's rate


def test_torch_points_inductor_and_triton_at_the_folder_it_is_given(tmp_path):
    pytest.importorskip("torch")
    from backends.torch import TorchBackend

    env = {**os.environ, **TorchBackend().compile_cache_env(str(tmp_path))}
    code = ("import torch._inductor.config as c\n"
            "try:\n from torch._inductor.runtime.cache_dir_utils import cache_dir\n"
            "except ImportError:\n from torch._inductor.codecache import cache_dir\n"
            "print(cache_dir())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "inductor")
