"""Data-parallel ResNet-50 training: replicas through torchrun + DDP (gloo on the CPU) and
tf.distribute.MultiWorkerMirroredStrategy, their records, failures, several nodes on localhost.

The real runs use 32-px images, batch 2 per replica, 1-step blocks: each takes seconds on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from backends.torch.launcher import torchrun_failures
from harness.errors import InputError
from harness.results.record import Result
from harness.scenario.load import load_scenario
from harness.seam import distributed as dp
from harness.seam.backend import Backend
from harness.seam.runspec import RunSpec
from harness.session import dataparallel
from harness.session.plan import run_key

ROOT = Path(__file__).resolve().parent.parent
HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("torchvision") is not None
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch and torchvision")
needs_tf = pytest.mark.skipif(not HAS_TF, reason="needs TensorFlow")

TINY = {"batch_size": 2, "image_size": 32, "num_classes": 10, "memory_format": "channels_last"}


def launch_spec(backend: str, params: dict, options: dict | None = None, cpu_threads: dict | None = None) -> RunSpec:
    """A resnet50_train spec as the runner hands it to `Backend.launch`."""
    return RunSpec(run_id="r", session_id="s", run_key="k", scenario="t", workload="resnet50_train", backend=backend,
                   device="cpu", params=params, measure={}, seed=0, options=options or {},
                   cpu_threads=cpu_threads or {})


def scenario(backend: str, measure: dict | None = None, **params) -> dict:
    return {"name": "dp", "workload": "resnet50_train", "params": {**TINY, "replicas": 2, **params},
            "measure": {"warmup": 0, "steps": 1, "repeats": 2, "processes": 1, "timeout_s": 300, **(measure or {})},
            "backends": [backend], "devices": ["cpu"]}


#: A tiny GPT for the tests that compare the weights of two launchers after training: at TINY's size (batch 2 of
#: 32x32 images, BatchNorm over two values at layer4's 1x1) ResNet-50's gradients explode at initialisation (a norm
#: of the order of 1e8 on the CPU), so each step amplifies a last-bit difference between two launchers' kernels
#: into a different model, and equal weights would hold only for bitwise-equal kernels; this model's steps keep
#: rounding at rounding.
GPT_TINY = {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 128, "batch_size": 4}


def gpt_scenario(**params) -> dict:
    """A two-replica TensorFlow gpt_train scenario at GPT_TINY."""
    return {**scenario("tensorflow"), "workload": "gpt_train", "params": {**GPT_TINY, "replicas": 2, **params}}


def records(store: Path) -> list[dict]:
    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        return [json.loads(r[0]) for r in db.execute("SELECT record FROM results ORDER BY started_at, rowid")]


def leftovers(marker: str) -> list[str]:
    """Command lines of live processes that name `marker` (a test's temporary directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and dp.pid_alive(int(entry.name)):
            found.append(cmdline)
    return found


# --------------------------------------------------------------------------- validation, keys, seam


@pytest.mark.parametrize("value, words", [(0, "greater than or equal to 1"), (True, "boolean"), ("2", "integer"),
                                          (1.5, "integer"), (-3, "greater than or equal to 1")])
def test_bad_replicas_are_input_errors_naming_file_and_field(write_scenario, value, words):
    path = write_scenario({"name": "r", "workload": "resnet50_train", "params": {"replicas": value}})
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert path in str(info.value) and "params.replicas" in str(info.value)
    assert words in str(info.value).lower() or words in str(info.value)


def test_bad_replicas_exit_2_from_the_cli(write_scenario, harness_cli):
    path = write_scenario({"name": "r", "workload": "resnet50_train", "params": {"replicas": 0}})
    code, _, err = harness_cli("run", path, "--dry-run")
    assert code == 2 and "params.replicas" in err and path in err


def test_one_replica_keeps_the_run_key_of_records_made_before_replicas_existed():
    params = {"batch_size": 4}
    assert run_key("s", "resnet50_train", "torch", "cpu", {**params, "replicas": 1}) == \
        run_key("s", "resnet50_train", "torch", "cpu", params)
    assert run_key("s", "resnet50_train", "torch", "cpu", {**params, "replicas": 2}) != \
        run_key("s", "resnet50_train", "torch", "cpu", params)


def test_the_first_round_runs_each_one_replica_base_before_the_data_parallel_runs_scaled_against_it(write_scenario):
    """The runner fills scaling_efficiency from the base's records already stored: in round 0 every replicas > 1
    configuration follows its 1-replica one (the sixth GPU session's plan ran one before its base, and that
    record had no efficiency). Later rounds stay shuffled; every configuration still runs once a round."""
    from harness.session.plan import build_plan

    def plan(seed):
        data = {"name": "dp", "workload": "resnet50_train", "params": TINY, "backends": ["torch", "tensorflow"],
                "devices": ["cpu"], "seed": seed, "measure": {"processes": 3},
                "sweep": {"replicas": [2, 4, 1], "torch.optimize_ddp": ["ddp_optimizer", "no_optimization"]}}
        return build_plan(load_scenario(write_scenario(data)), "s")

    def base_of(spec):
        return (spec.backend, json.dumps(spec.options, sort_keys=True))

    later_round_base_after = False
    for seed in range(12):
        specs = plan(seed)
        configurations = len({s.run_key for s in specs})
        assert configurations == 3 * 2 + 3 and len(specs) == 3 * configurations
        for r in range(3):
            chunk = specs[r * configurations:(r + 1) * configurations]
            assert {s.replicate for s in chunk} == {r} and len({s.run_key for s in chunk}) == configurations
            seen = set()
            for spec in chunk:
                if spec.params["replicas"] == 1:
                    seen.add(base_of(spec))
                elif base_of(spec) not in seen:
                    assert r > 0, (seed, spec.label())
                    later_round_base_after = True
    assert later_round_base_after  # rounds after the first are not reordered


def test_compiler_data_parallel_options_are_left_out_at_their_default_and_checked():
    """torch.optimize_ddp and tensorflow.distributed_xla came after records were stored: at their defaults
    they leave the options (and so the run_key) as before; a bad value is an error naming the option."""
    from backends.tensorflow import TensorFlowBackend
    from backends.torch import TorchBackend

    torch_b, tf_b = TorchBackend(), TensorFlowBackend()
    assert torch_b.validate_options({"optimize_ddp": "ddp_optimizer"}) == torch_b.validate_options({})
    assert torch_b.validate_options({"optimize_ddp": "no_optimization"})["optimize_ddp"] == "no_optimization"
    assert tf_b.validate_options({"distributed_xla": "forward_backward"}) == tf_b.validate_options({})
    assert tf_b.validate_options({"distributed_xla": "whole_step"})["distributed_xla"] == "whole_step"
    with pytest.raises(ValueError, match="optimize_ddp"):
        torch_b.validate_options({"optimize_ddp": "python_reducer"})
    with pytest.raises(ValueError, match="distributed_xla"):
        tf_b.validate_options({"distributed_xla": "all"})


def test_tensorflow_whole_step_xla_on_the_cpu_is_unsupported_before_a_worker_starts():
    from backends.tensorflow import WHOLE_STEP_XLA_CPU, TensorFlowBackend

    b = TensorFlowBackend()
    params = {"replicas": 2, "execution": "compiled"}
    assert b.unsupported_reason("resnet50_train", params, "cpu", {"distributed_xla": "whole_step"}) == WHOLE_STEP_XLA_CPU
    assert b.unsupported_reason("resnet50_train", params, "cpu", {}) != WHOLE_STEP_XLA_CPU
    assert b.unsupported_reason("resnet50_train", {**params, "replicas": 1}, "cpu", {"distributed_xla": "whole_step"}) != WHOLE_STEP_XLA_CPU


@needs_torch
@pytest.mark.parametrize("choice, split", [("no_optimization", False), ("ddp_optimizer", True)])
def test_torch_optimize_ddp_sets_dynamo_and_is_recorded(choice, split, tmp_path):
    """The option reaches torch._dynamo.config.optimize_ddp, and the record's all-reduce settings say whether
    the all-reduce overlaps the compiled backward (one gloo process: DDP needs a process group)."""
    from types import SimpleNamespace

    import torch
    import torch.distributed as tdist

    from backends.torch.ddp import data_parallel

    if not hasattr(torch, "compile"):
        pytest.skip("no torch.compile in this torch")
    import torch._dynamo as dynamo

    before = dynamo.config.optimize_ddp
    tdist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        device = SimpleNamespace(torch=torch.device("cpu"), replica=SimpleNamespace(world_size=1), dist_backend="gloo")
        params = SimpleNamespace(execution="compiled")
        _, api, allreduce = data_parallel(torch.nn.Linear(2, 2), device, params, choice)
        assert dynamo.config.optimize_ddp is split and allreduce["dynamo_optimize_ddp"] is split
        assert ("none" in allreduce["overlap"]) is (not split)
        assert "DistributedDataParallel" in api
    finally:
        tdist.destroy_process_group()
        dynamo.config.optimize_ddp = before


def test_global_work_per_step_counts_every_replica():
    from harness.workloads import WORKLOADS

    w = WORKLOADS["resnet50_train"]
    one, two = w.validate({**TINY}), w.validate({**TINY, "replicas": 2})
    assert w.headline_per_step(two) == 2 * w.headline_per_step(one) == 4.0
    assert w.flops_per_step(two) == 2 * w.flops_per_step(one)


def test_a_backend_without_data_parallel_is_unsupported_not_a_crash():
    class Plain(Backend):
        name = "plain"
        workloads = {"resnet50_train": {}}

    reason = Plain().unsupported_reason("resnet50_train", {"replicas": 2}, "cpu")
    assert reason and "does not implement data-parallel" in reason
    assert Plain().unsupported_reason("resnet50_train", {"replicas": 1}, "cpu") is None


def test_the_jax_plugin_answers_unsupported_for_replicas():
    sys.path.insert(0, str(ROOT / "plugins" / "harness-jax"))
    try:
        jax_backend = pytest.importorskip("harness_jax")
        reason = jax_backend.JaxBackend().unsupported_reason("resnet50_train", {"replicas": 2, "execution": "compiled"}, "cpu")
        assert reason and "data-parallel" in reason
    finally:
        sys.path.remove(str(ROOT / "plugins" / "harness-jax"))


def test_fake_backend_run_with_replicas_is_unsupported_in_the_record(fake_backend, write_scenario, harness_cli, tmp_path):
    path = write_scenario({**scenario("fake"), "backends": ["fake"]})
    code, out, err = harness_cli("run", path, "--store", str(tmp_path / "f.db"))
    assert code == 3, err  # the only run is unsupported: no measurement
    (record,) = records(tmp_path / "f.db")
    assert record["status"] == "unsupported" and "data-parallel" in record["error"] and record["replicas"] == 2


def test_cluster_flags_are_checked_together():
    with pytest.raises(InputError, match="node-rank"):
        dp.Cluster.from_env({"HARNESS_NNODES": "2", "HARNESS_NODE_RANK": "2", "HARNESS_RDZV_ENDPOINT": "h:1"})
    with pytest.raises(InputError, match="rdzv-endpoint"):
        dp.Cluster.from_env({"HARNESS_NNODES": "2", "HARNESS_NODE_RANK": "1"})
    assert dp.Cluster.from_env({}) == dp.Cluster()


# --------------------------------------------------------------------------- merging the replicas' results


def test_torchrun_failure_summary_names_the_root_cause_rank():
    log = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
harness.worker FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_10:00:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
"""
    assert torchrun_failures(log) == {1: "killed by signal SIGKILL (the OS out-of-memory killer sends SIGKILL) "
                                            "(torchrun's root cause)"}


def test_torchrun_launch_one_node_meets_on_a_port_of_its_own_with_the_threads_shared_out():
    from backends.torch import TorchBackend

    spec = launch_spec("torch", {**TINY, "replicas": 2}, cpu_threads={"intra_op": 3})
    launch = TorchBackend().launch(spec, [sys.executable, "-m", "harness.worker", "S", "R"], dp.Cluster())
    (process,) = launch.processes
    flags = {a: b for a, b in zip(process.argv, process.argv[1:]) if a.startswith("--")}
    # not --standalone: up to torch 2.1 that was port 29400, so two runs at once on one machine collided
    assert process.argv[1:3] == ["-m", "torch.distributed.run"] and "--standalone" not in process.argv
    assert flags["--rdzv-backend"] == "c10d" and flags["--rdzv-endpoint"] == "localhost:0" and flags["--nnodes"] == "1"
    other = TorchBackend().launch(spec, [sys.executable, "-m", "harness.worker", "S", "R"], dp.Cluster())
    assert other.processes[0].argv[other.processes[0].argv.index("--rdzv-id") + 1] != flags["--rdzv-id"]
    assert process.argv[process.argv.index("--nproc-per-node") + 1] == "2"
    assert process.argv[-4:] == ["-m", "harness.worker", "S", "R"]
    assert process.env == {"OMP_NUM_THREADS": "3"} and process.ranks == launch.local_ranks == (0, 1)
    assert launch.failures_from_log is torchrun_failures and launch.api.startswith("torchrun (-m torch.distributed.run")


def test_torchrun_launch_of_node_1_of_2_meets_node_0_on_a_port_moved_by_the_run_index():
    from backends.torch import TorchBackend

    cluster = dp.Cluster(nnodes=2, node_rank=1, rdzv_endpoint="node0:29500", rdzv_id="s-k-0-3", run_index=33)
    launch = TorchBackend().launch(launch_spec("torch", {**TINY, "replicas": 4}), ["python", "-m", "w"], cluster)
    argv = launch.processes[0].argv
    flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert flags["--nnodes"] == "2" and flags["--node-rank"] == "1" and flags["--master-addr"] == "node0"
    assert flags["--master-port"] == str(29500 + 33 % 32) and flags["--rdzv-id"] == "s-k-0-3"
    assert launch.local_ranks == (2, 3) and "--standalone" not in argv


def test_tensorflow_multi_worker_launch_gives_each_worker_its_task_in_one_cluster(monkeypatch):
    from backends.tensorflow import TensorFlowBackend
    from harness.errors import Unsupported

    spec = launch_spec("tensorflow", {**TINY, "replicas": 2})
    launch = TensorFlowBackend().launch(spec, ["worker"], dp.Cluster())
    configs = [json.loads(p.env["TF_CONFIG"]) for p in launch.processes]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert configs[0]["cluster"] == configs[1]["cluster"] and len(configs[0]["cluster"]["worker"]) == 2
    assert [p.env["RANK"] for p in launch.processes] == ["0", "1"] and launch.local_ranks == (0, 1)
    # several nodes: the cluster is the user's TF_CONFIG, and this node's workers take their ranks in it
    nodes = dp.Cluster(nnodes=2, node_rank=1, rdzv_endpoint="h:1")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(Unsupported, match="needs TF_CONFIG"):
        TensorFlowBackend().launch(launch_spec("tensorflow", {**TINY, "replicas": 4}), ["worker"], nodes)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "a:2", "b:1", "b:2"]}}))
    launch = TensorFlowBackend().launch(launch_spec("tensorflow", {**TINY, "replicas": 4}), ["worker"], nodes)
    assert [json.loads(p.env["TF_CONFIG"])["task"]["index"] for p in launch.processes] == [2, 3]
    assert launch.local_ranks == (2, 3) and "TF_CONFIG's cluster" in launch.api


def written(rows: dict) -> dict[int, Result]:
    """rank -> the record a replica's result file holds, as read_rank_results reads it."""
    return {rank: Result.from_dict(row) for rank, row in rows.items()}


def test_merge_names_the_replica_that_died_not_the_peer_harness_stopped_after_it():
    record = dataparallel.merge(Result(), {}, [0, 1], 2, {0: "killed by signal SIGTERM", 1: "killed by signal SIGSEGV"},
                      timed_out=False)
    assert record.status == "failed" and record.distributed.failed_rank == 1
    assert "SIGSEGV" in record.error and "SIGTERM" in record.distributed.other_failures[0]


def test_merge_names_the_replica_that_died_not_the_peer_whose_collective_broke():
    peer = {"status": "failed", "error": "RuntimeError: Connection closed by peer", "checks": {}}
    record = dataparallel.merge(Result(), written({0: peer}), (0, 1), 2, {1: "killed by signal SIGKILL"}, timed_out=False)
    assert record.status == "failed" and record.error.startswith("replica rank 1 killed by signal SIGKILL")
    assert record.distributed.failed_rank == 1


def test_merge_names_the_replica_that_wrote_its_error_not_the_peer_harness_stopped_after_it():
    # TensorFlow 2.12 under a host memory limit: one worker writes its error and exits, its peer waits in a
    # collective until harness stops it with SIGTERM; the cause is the worker that wrote the error
    failed = {"status": "failed", "error": "InternalError: std::bad_alloc", "checks": {}}
    for rank, other in ((0, 1), (1, 0)):
        record = dataparallel.merge(Result(), written({rank: failed}), (0, 1), 2, {other: "killed by signal SIGTERM"},
                                    timed_out=False)
        assert record.status == "failed" and record.distributed.failed_rank == rank
        assert "bad_alloc" in record.error and "SIGTERM" not in record.error
        assert "SIGTERM" in record.distributed.other_failures[0]
    # a peer stopped with SIGTERM is the cause only where nothing else went wrong
    ok = {"status": "ok", "median": 10.0, "checks": {}}
    record = dataparallel.merge(Result(), written({0: ok}), (0, 1), 2, {1: "killed by signal SIGTERM"}, timed_out=False)
    assert record.distributed.failed_rank == 1 and "SIGTERM" in record.error


def test_merge_an_out_of_memory_replica_makes_the_run_oom_with_its_evidence():
    ok = {"status": "ok", "median": 10.0, "checks": {"inputs_fingerprint": "a"}}
    oom = {"status": "oom", "error": "OutOfMemoryError: CUDA out of memory", "oom_evidence": "OutOfMemoryError: CUDA"}
    record = dataparallel.merge(Result(), written({0: ok, 1: oom}), (0, 1), 2, {}, timed_out=False)
    assert record.status == "oom" and "replica rank 1" in record.error
    assert record.note("oom_evidence").startswith("replica rank 1:")


def test_merge_all_ok_keeps_rank_0_figures_and_every_rank():
    results = {r: {"status": "ok", "median": 10.0 + r, "peak_allocated_bytes": 100 + r, "device": f"cuda:{r}",
                   "checks": {"inputs_fingerprint": str(r)}} for r in (0, 1)}
    record = dataparallel.merge(Result(), written(results), (0, 1), 2, {}, timed_out=False)
    assert record.status == "ok" and record.median == 10.0 and record.peak_allocated_bytes == 100
    assert [r.device for r in record.distributed.ranks] == ["cuda:0", "cuda:1"]


def test_scaling_efficiency_and_replica_devices():
    assert dataparallel.scaling_efficiency(190.0, 2, 100.0) == pytest.approx(0.95)
    assert dataparallel.scaling_efficiency(None, 2, 100.0) is None
    assert dp.replica_device("cuda:2", 1) == "cuda:3" and dp.replica_device("cpu", 1) == "cpu"
    assert dp.threads_per_replica({"intra_op": 3}, 2)["intra_op"] == 3
    assert dp.threads_per_replica({}, 64)["intra_op"] == 1


# --------------------------------------------------------------------------- real runs on the CPU


def _check_ok_record(record: dict, backend: str, batch_size: int = TINY["batch_size"]):
    assert record["status"] == "ok", (record.get("error"), record.get("log_tail"))
    assert record["replicas"] == 2 and record["params"]["batch_size"] == batch_size
    dist = record["distributed"]
    assert dist["world_size"] == 2 and dist["global_batch"] == 2 * batch_size
    ranks = dist["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["status"] == "ok" for r in ranks)
    # each rank trained on its own inputs; rank 0's are the 1-replica run's
    assert ranks[0]["inputs_fingerprint"] == record["checks"]["inputs_fingerprint"] != ranks[1]["inputs_fingerprint"]
    # the all-reduce kept every replica's weights identical after different inputs
    assert ranks[0]["parameters_sum"] == pytest.approx(ranks[1]["parameters_sum"], rel=1e-6)
    assert record["median"] > 0 and dist["allreduce"]
    return dist


@needs_torch
def test_torch_two_gloo_replicas_and_scaling_efficiency(write_scenario, harness_cli, tmp_path):
    data = scenario("torch")
    data["params"].pop("replicas")
    data["sweep"] = {"replicas": [1, 2]}
    data["seed"] = 3  # the plan runs replicas=1 first with this seed, so the 2-replica record gets its efficiency
    store = tmp_path / "t.db"
    code, out, err = harness_cli("run", write_scenario(data), "--store", str(store), env={"TMPDIR": str(tmp_path)})
    assert code == 0, err
    by = {r["replicas"]: r for r in records(store)}
    dist = _check_ok_record(by[2], "torch")
    assert dist["allreduce"]["backend"] == "gloo" and dist["allreduce"]["bucket_cap_mb"] == 25
    assert "torchrun" in dist["launcher"] and "DistributedDataParallel" in by[2]["api"]["distribution"]
    assert by[1]["checks"]["inputs_fingerprint"] == by[2]["checks"]["inputs_fingerprint"]
    assert by[1]["distributed"] == {} and by[1]["replicas"] == 1
    # the runner held the host's timing lock for the replicas (harness.worker.hostlock), the worker for one
    assert by[2]["env"]["isolation"]["mode"] == by[1]["env"]["isolation"]["mode"] == "exclusive"
    assert by[2]["env"]["isolation"]["held_to"] > by[2]["env"]["isolation"]["held_from"]
    if by[1]["started_at"] < by[2]["started_at"]:
        assert by[2]["scaling_efficiency"] == pytest.approx(by[2]["median"] / (2 * by[1]["median"]))
    code, out, err = harness_cli("compare", "--by", "replicas", "--store", str(store), "--wide")
    assert code == 0 and "scaling efficiency" in out, err
    code, out, err = harness_cli("report", "--store", str(store), "--output", str(tmp_path / "rep"))
    report = (tmp_path / "rep" / "report.md").read_text()
    assert code == 0 and "## Data-parallel scaling" in report and "scaling efficiency" in report, err
    assert leftovers(str(tmp_path)) == []


@needs_tf
def test_tensorflow_two_workers_graph(write_scenario, harness_cli, tmp_path):
    store = tmp_path / "tf.db"
    code, out, err = harness_cli("run", write_scenario(scenario("tensorflow", execution="graph")), "--store", str(store),
                                 env={"TMPDIR": str(tmp_path)})
    assert code == 0, err
    (record,) = records(store)
    dist = _check_ok_record(record, "tensorflow")
    assert dist["allreduce"]["strategy"] == "tf.distribute.MultiWorkerMirroredStrategy"
    assert dist["allreduce"]["implementation"] == "RING" and dist["allreduce"]["bytes_per_pack"] > 0
    assert "TF_CONFIG" in dist["launcher"] and "MultiWorkerMirroredStrategy" in record["api"]["distribution"]
    assert leftovers(str(tmp_path)) == []


@needs_tf
def test_tensorflow_compiled_with_two_workers_keeps_the_all_reduce_outside_xla(write_scenario, harness_cli, tmp_path):
    """XLA compiles each replica's forward and backward; the all-reduce and the update run in the graph
    around it. With the all-reduce inside the XLA function TensorFlow refused the step (merge_call in a
    nested tf.function, seen on two H200s on 2026-11-30); the CPU refuses XLA collectives outright."""
    store = tmp_path / "x.db"
    code, _, err = harness_cli("run", write_scenario(gpt_scenario(execution="compiled")), "--store", str(store),
                               env={"TMPDIR": str(tmp_path)})
    assert code == 0, err
    (record,) = records(store)
    dist = _check_ok_record(record, "tensorflow", batch_size=GPT_TINY["batch_size"])
    assert "jit_compile=True" in record["api"]["execution"] and "all-reduce and the update outside XLA" in record["api"]["execution"]
    assert dist["allreduce"]["strategy"] == "tf.distribute.MultiWorkerMirroredStrategy"
    assert leftovers(str(tmp_path)) == []


@needs_tf
def test_tensorflow_keras_choices_with_two_workers(write_scenario, harness_cli, tmp_path):
    """The other Keras of this era (tf_keras beside Keras 3 on TF 2.16+; tf.keras on TF 2.12) trains data-parallel too."""
    from backends.tensorflow import TensorFlowBackend, _version_tuple

    modern = _version_tuple(TensorFlowBackend().framework_version()) >= (2, 16)
    data = {**scenario("tensorflow", execution="graph"), "options": {"tensorflow": {"keras": "tf_keras"}}}
    if modern and importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf_keras is not installed")
    store = tmp_path / "k.db"
    code, _, err = harness_cli("run", write_scenario(data), "--store", str(store))
    assert code == 0, err
    (record,) = records(store)
    _check_ok_record(record, "tensorflow")
    assert "Keras 2" in record["api"]["keras"]


@needs_tf
def test_tensorflow_mirrored_strategy_trains_every_replica_in_one_process_as_the_workers_do(
        write_scenario, harness_cli, tmp_path):
    """tensorflow.strategy=mirrored: one process, MirroredStrategy over two logical CPU devices, each replica on
    the inputs of the worker of the same rank. The same seed, inputs and steps as two MultiWorkerMirroredStrategy
    workers: the same first loss, and (after the all-reduced updates) the same weights up to rounding (GPT_TINY:
    a model whose few steps are well conditioned, so rounding stays rounding)."""
    got = {}
    for strategy in ("multi_worker", "mirrored"):
        data = {**gpt_scenario(execution="graph"), "seed": 5,
                "options": {"tensorflow": {"strategy": strategy}}}
        store = tmp_path / f"{strategy}.db"
        code, _, err = harness_cli("run", write_scenario(data), "--store", str(store), env={"TMPDIR": str(tmp_path)})
        assert code == 0, err
        (got[strategy],) = records(store)
    mirrored, workers = got["mirrored"], got["multi_worker"]
    assert mirrored["status"] == "ok", (mirrored.get("error"), mirrored.get("log_tail"))
    assert mirrored["options"]["strategy"] == "mirrored" and "strategy" not in workers["options"]
    dist = mirrored["distributed"]
    assert dist["world_size"] == 2 and dist["global_batch"] == 2 * GPT_TINY["batch_size"]
    assert dist["replicas_in_process"] == 2
    assert "MirroredStrategy" in dist["launcher"] and [r["rank"] for r in dist["ranks"]] == [0]
    assert dist["allreduce"]["strategy"] == "tf.distribute.MirroredStrategy"
    assert "ReductionToOneDevice" in dist["allreduce"]["implementation"]
    assert [p["replica"] for p in dist["replica_peaks"]] == [0, 1]
    assert "MirroredStrategy, 2 replicas in one process" in mirrored["api"]["distribution"]
    assert mirrored["median"] > 0
    # the same work: replica 0's inputs are worker 0's, and both trained the same model the same way
    assert mirrored["checks"]["inputs_fingerprint"] == workers["checks"]["inputs_fingerprint"]
    assert mirrored["checks"]["loss_first"] == pytest.approx(workers["checks"]["loss_first"], rel=1e-5)
    assert mirrored["checks"]["parameters_sum"] == pytest.approx(workers["checks"]["parameters_sum"], rel=1e-5)
    assert mirrored["checks"]["loss_last"] == pytest.approx(workers["checks"]["loss_last"], rel=1e-3)
    assert leftovers(str(tmp_path)) == []


def test_tensorflow_mirrored_strategy_refuses_whole_step_xla_and_several_nodes():
    from backends.tensorflow import MIRRORED_WHOLE_STEP, TensorFlowBackend
    from harness.errors import Unsupported

    b = TensorFlowBackend()
    assert b.validate_options({"strategy": "multi_worker"}) == b.validate_options({})
    with pytest.raises(ValueError, match="strategy"):
        b.validate_options({"strategy": "central_storage"})
    params = {"replicas": 2, "execution": "compiled"}
    both = {"strategy": "mirrored", "distributed_xla": "whole_step"}
    assert b.unsupported_reason("resnet50_train", params, "cuda:0", both) == MIRRORED_WHOLE_STEP
    assert b.unsupported_reason("resnet50_train", params, "cuda:0", {"strategy": "mirrored"}) is None
    spec = launch_spec("tensorflow", {**TINY, **params}, {"strategy": "mirrored"})
    launch = b.launch(spec, ["worker"], dp.Cluster())
    assert len(launch.processes) == 1 and launch.local_ranks == (0,)
    assert launch.processes[0].env["HARNESS_TF_STRATEGY"] == "mirrored" and launch.processes[0].env["WORLD_SIZE"] == "2"
    with pytest.raises(Unsupported, match="one machine"):
        b.launch(spec, ["worker"], dp.Cluster(nnodes=2, node_rank=0, rdzv_endpoint="h:1"))
    # the default: one worker per replica, each told so (a stray HARNESS_TF_STRATEGY cannot turn them mirrored)
    workers = b.launch(replace(spec, options={}), ["worker"], dp.Cluster())
    assert [p.env["HARNESS_TF_STRATEGY"] for p in workers.processes] == ["multi_worker", "multi_worker"]


def _kill_rank_when_running(tmp_path: Path, rank: int, killed: list):
    """Watch the runner's temporary directory; SIGKILL `rank` once it has timed a block."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        for pid_file in tmp_path.glob(f"harness-run-*/result.json.pids/{rank}"):
            progress = pid_file.parent.parent / "progress.jsonl"
            if progress.exists() and b'"block"' in progress.read_bytes():
                pid = int(pid_file.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.2)


@needs_torch
@pytest.mark.parametrize("backend", ["torch", pytest.param("tensorflow", marks=needs_tf)])
def test_a_replica_killed_with_sigkill_fails_the_run_naming_its_rank_and_nothing_survives(
        backend, write_scenario, harness_cli, tmp_path):
    data = scenario(backend, measure={"repeats": 10000, "steps": 1, "timeout_s": 240},
                    **({"execution": "graph"} if backend == "tensorflow" else {}))
    killed: list = []
    watcher = threading.Thread(target=_kill_rank_when_running, args=(tmp_path, 1, killed), daemon=True)
    watcher.start()
    store = tmp_path / "k.db"
    started = time.monotonic()
    code, out, err = harness_cli("run", write_scenario(data), "--store", str(store), env={"TMPDIR": str(tmp_path)})
    watcher.join(5)
    assert killed, err
    assert code == 1, err
    (record,) = records(store)
    assert record["status"] == "failed" and record["distributed"]["failed_rank"] == 1, record["error"]
    assert "replica rank 1" in record["error"] and "SIGKILL" in record["error"]
    assert time.monotonic() - started < 200  # the peers were ended, not left to the timeout
    assert leftovers(str(tmp_path)) == []


@needs_torch
def test_a_data_parallel_run_does_not_need_port_29400(write_scenario, harness_cli, tmp_path):
    """Up to torch 2.1 torchrun's --standalone rendezvous took port 29400: a second run on the machine failed."""
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind(("0.0.0.0", 29400))
        except OSError:
            pytest.skip("port 29400 is taken on this machine already")
        held.listen()
        store = tmp_path / "p.db"
        code, _, err = harness_cli("run", write_scenario(scenario("torch")), "--store", str(store),
                                   env={"TMPDIR": str(tmp_path)})
    (record,) = records(store)
    assert code == 0 and record["status"] == "ok", (record["status"], record.get("error"), err[-2000:])


@needs_torch
def test_a_timeout_ends_every_replica(write_scenario, harness_cli, tmp_path):
    data = scenario("torch", measure={"repeats": 10000, "timeout_s": 12})
    store = tmp_path / "t.db"
    code, _, err = harness_cli("run", write_scenario(data), "--store", str(store), env={"TMPDIR": str(tmp_path)})
    assert code == 1, err
    (record,) = records(store)
    assert record["status"] == "timeout" and "every replica stopped" in record["error"], (
        record["status"], record.get("error"), (record.get("log_tail") or "")[-3000:])
    assert leftovers(str(tmp_path)) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@needs_torch
@pytest.mark.parametrize("backend", ["torch", pytest.param("tensorflow", marks=needs_tf)])
def test_two_nodes_on_localhost(backend, write_scenario, tmp_path):
    """Two `harness run` invocations, node 0 and node 1, one replica each: node 0 stores the record."""
    data = scenario(backend, **({"execution": "graph"} if backend == "tensorflow" else {}))
    path = write_scenario(data)
    port = _free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    if backend == "tensorflow":
        ports = dp.free_ports(2)
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]}})
    procs = []
    for node in (0, 1):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "harness", "run", path, "--store", str(tmp_path / f"node{node}.db"), "-q",
             "--nnodes", "2", "--node-rank", str(node), "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t"],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    (record,) = records(tmp_path / "node0.db")
    assert records(tmp_path / "node1.db") == []
    assert record["status"] == "ok" and record["distributed"]["nnodes"] == 2
    assert record["env"]["isolation"]["mode"] == "not_taken"  # node-local locks over two nodes could deadlock
    assert record["distributed"]["world_size"] == 2 and [r["rank"] for r in record["distributed"]["ranks"]] == [0]
    assert leftovers(str(tmp_path)) == []


@needs_torch
def test_a_replica_out_of_memory_makes_the_run_oom_with_its_evidence_and_nothing_survives(
        write_scenario, harness_cli, tmp_path):
    # a real allocation failure in the replicas (the host limit, as for one-process runs in test_reliability),
    # then a run that fits: the failure is the run's status, with the rank and the evidence, and the next goes on
    data = scenario("torch")
    data["params"].update(image_size=64)
    data["sweep"] = {"batch_size": [512, 2]}
    store = tmp_path / "oom.db"
    code, out, err = harness_cli("run", write_scenario(data), "--store", str(store), "--memory-limit", "1.5GiB",
                                 env={"TMPDIR": str(tmp_path)})
    assert code == 1, err  # one run did not succeed
    big, small = records(store)
    assert big["params"]["batch_size"] == 512 and big["status"] == "oom", big.get("error")
    assert big["distributed"]["failed_rank"] in (0, 1) and big.get("oom_evidence")
    assert small["params"]["batch_size"] == 2 and small["status"] == "ok", small.get("error")
    assert leftovers(str(tmp_path)) == []


@needs_tf
def test_a_tensorflow_worker_out_of_memory_makes_the_run_oom_and_nothing_survives(write_scenario, harness_cli, tmp_path):
    data = scenario("tensorflow", execution="graph")
    data["params"].update(image_size=64, batch_size=512)
    store = tmp_path / "tfoom.db"
    code, out, err = harness_cli("run", write_scenario(data), "--store", str(store), "--memory-limit", "1.5GiB",
                                 env={"TMPDIR": str(tmp_path)})
    assert code == 1, err
    (record,) = records(store)
    # TF 2.21 raises MemoryError / ResourceExhausted: oom with the evidence. TF 2.12 under the host limit often
    # dies with SIGSEGV instead (no evidence of memory: failed); either way the cause is the replica that died,
    # never the peer that harness stopped with SIGTERM after it
    assert record["status"] in ("oom", "failed"), record.get("error")
    assert record["distributed"]["failed_rank"] in (0, 1)
    assert record.get("oom_evidence") if record["status"] == "oom" else "SIGTERM" not in record["error"]
    assert leftovers(str(tmp_path)) == []
