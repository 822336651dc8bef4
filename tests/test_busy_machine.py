"""A busy machine (a load above the cores, other processes on the run's GPU) is said so: before a run, in
every record's and `harness env`'s machine state, and beside every verdict it touched."""

import json

from click.testing import CliRunner

from harness.cli import main
from harness.machine.envcheck import busy_reasons, environment_warnings
from harness.results.compare import (
    FASTER,
    compare,
    display_rows,
)
from tests.test_compare import processes


def test_busy_reasons_read_the_load_and_the_gpu_processes_of_the_runs_device():
    quiet = {"load_average": [1.9, 1.0, 0.5], "cpu_count": 2, "gpu_processes": {"0": [], "1": []}}
    assert busy_reasons(quiet, "cuda:0") == []
    loaded = {**quiet, "load_average": [6.0, 5.0, 4.0]}
    assert busy_reasons(loaded, "cpu") == ["load average 6.0 exceeds the 2 cores"]
    shared = {**quiet, "gpu_processes": {"0": [], "1": [{"pid": 4242, "used_memory_bytes": 1 << 30}]}}
    assert busy_reasons(shared, "cuda:1") == ["1 other process(es) computing on GPU 1"]
    assert busy_reasons(shared, "cpu") == []
    assert busy_reasons(shared) == ["1 other process(es) computing on GPU 1"]  # before a session: any GPU
    masked = {**shared, "variables": {"CUDA_VISIBLE_DEVICES": "1"}}
    assert busy_reasons(masked, "cuda:0") == ["1 other process(es) computing on GPU 1"]
    assert busy_reasons({}, "cuda:0") == [] and busy_reasons(None) == []  # records older than this


def test_the_hosts_other_gpus_count_for_a_gpu_run():
    # two sessions side by side, one per GPU, share the host's power and cooling: SM clocks moved from 1,545 to
    # 1,935 MHz with what ran beside them, so a run on GPU 0 with work on GPU 1 was measured on a busy machine
    quiet = {"load_average": [0.5, 0.5, 0.5], "cpu_count": 2, "gpu_processes": {"0": [], "1": []},
             "gpu_utilization": {"0": 99.0, "1": 0.0}}
    assert busy_reasons(quiet, "cuda:0") == []  # the run's own GPU is busy with the run
    beside = {**quiet, "gpu_processes": {"0": [], "1": [{"pid": 4242, "used_memory_bytes": 1 << 30}]}}
    assert busy_reasons(beside, "cuda:0") == ["1 process(es) computing on the host's GPU 1, beside this run's GPU"]
    hidden = {**beside, "variables": {"CUDA_VISIBLE_DEVICES": "0"}}  # hiding GPU 1 does not make it quiet
    assert busy_reasons(hidden, "cuda:0") == busy_reasons(hidden) == busy_reasons(beside, "cuda:0")
    # a process NVML cannot list (another container's) still shows in the GPU's utilisation
    unseen = {**quiet, "gpu_utilization": {"0": 99.0, "1": 87.0}}
    assert busy_reasons(unseen, "cuda:0") == ["the host's GPU 1 was 87% busy beside this run's GPU"]
    assert busy_reasons({**unseen, "gpu_utilization": {"0": 99.0, "1": 5.0}}, "cuda:0") == []
    assert busy_reasons(unseen, "cpu") == []  # a CPU run: the load average says what the host's threads did


def test_a_run_timed_with_the_host_shared_is_busy():
    env = {"load_average": [0.5, 0.5, 0.5], "cpu_count": 2}
    assert busy_reasons({**env, "isolation": {"mode": "exclusive", "waited_s": 3.0}}, "cpu") == []
    assert busy_reasons({**env, "isolation": {"mode": "shared"}}, "cpu") == [
        "timed with the host shared (measure.share_host): other sessions may have timed runs beside it"]


def test_a_run_on_a_busy_machine_is_warned_about_before_it_starts():
    env = {"load_average": [6.0, 5.0, 4.0], "cpu_count": 2, "cpu_governor": "performance",
           "gpu_processes": {"0": [{"pid": 1, "used_memory_bytes": None}]}}
    warnings = environment_warnings(env)
    assert any(w.startswith("busy machine: load average 6.0 exceeds the 2 cores") for w in warnings)
    assert any("busy machine: 1 other process(es) computing on GPU 0" in w for w in warnings)
    quiet = {"load_average": [0.1, 0.1, 0.1], "cpu_count": 2, "cpu_governor": "performance", "gpu_processes": None}
    assert not any(w.startswith("busy machine") for w in environment_warnings(quiet))


def test_every_record_and_harness_env_capture_the_machine_state():
    from harness.machine.env import capture

    env = capture()
    for key in ("load_average", "cpu_usable", "cpu_count", "cpu_governor", "gpu_processes"):
        assert key in env
    assert env["load_average"] is None or len(env["load_average"]) == 3
    shown = CliRunner().invoke(main, ["env", "--json"])
    data = json.loads(shown.output)
    assert "load_average" in data and "gpu_processes" in data and isinstance(data["warnings"], list)
    assert "load " in CliRunner().invoke(main, ["env"]).output


def test_compare_marks_verdicts_whose_records_were_measured_on_a_busy_machine():
    records = processes(1000.0, seed=1) + processes(1200.0, backend="tensorflow", seed=2)
    records[6]["env"] = {"load_average": [6.0, 5.0, 4.0], "cpu_count": 2}
    table = compare(records, ["backend"])
    row = table.iloc[0]
    assert row["verdict"] == FASTER and bool(row["busy"]) is True
    assert "tensorflow: busy machine in 1 of 5 process(es) (load average 6.0 exceeds the 2 cores)" in row["warnings"]
    _, shown = display_rows(table)
    assert shown[0]["verdict"] == "faster (busy machine)"
    quiet = compare(processes(1000.0, seed=1) + processes(1200.0, backend="tensorflow", seed=2), ["backend"])
    assert bool(quiet.iloc[0]["busy"]) is False and "busy" not in quiet.iloc[0]["warnings"]
    assert display_rows(quiet)[1][0]["verdict"] == "faster"


