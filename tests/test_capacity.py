"""The capacity search's own logic, with a scripted runner (no worker processes): probes, timeouts,
memory-edge errors, and what the capacity record says. Real workers are in test_reliability.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.results.record import Result
from harness.scenario.schema import parse_resolution
from harness.session import capacity, capacity_answer, capacity_search
from harness.session.capacity import find_max_batch
from harness.session.capacity_answer import fits, judge_probe
from harness.session.capacity_search import probe_timeout
from harness.session.plan import RunSpec


class ScriptedRunner:
    """Answers each probe from `script(batch, timeout_s)` -> (status, error); stores what it is given."""

    def __init__(self, script):
        self.script = script
        self.stored: list[dict] = []
        self.asked: list[tuple[int, float]] = []
        self.store = self
        self.on_start = lambda *a: None
        self.on_result = lambda *a: None
        self.on_progress = lambda *a: None

    def add(self, record):
        self.stored.append(record.to_dict())  # the flat row a store keeps

    def static_status(self, spec):
        return None

    def execute(self, spec: RunSpec) -> Result:
        batch, timeout = spec.params["batch_size"], spec.measure.timeout_s
        self.asked.append((batch, timeout))
        assert spec.probe is True and spec.measure.warmup == 0  # a cheap probe
        status, error = self.script(batch, timeout)
        return Result.from_dict({"status": status, "error": error, "params": dict(spec.params), "duration_s": batch / 100,
                                 "peak_allocated_bytes": batch * 1000 if status == "ok" else None, "device": "cuda:0",
                                 "warnings": [], "api": {"execution": "eager"}})


def spec(timeout_s=600.0) -> RunSpec:
    return RunSpec(run_id="r", session_id="s", run_key="k", scenario="cap", workload="resnet50_train",
                   backend="torch", device="cuda:0", params={"batch_size": 256, "precision": "amp_bf16"},
                   measure={"timeout_s": timeout_s, "warmup": 10, "steps": 50, "repeats": 5}, seed=0)


def search(script, **settings):
    runner = ScriptedRunner(script)
    outcome = find_max_batch(runner, [spec()], **settings)
    (record,) = outcome.records
    return runner, record


def test_a_probe_timeout_follows_the_batch_from_the_fitting_probes():
    assert probe_timeout(512, [], ceiling=600) == 600  # nothing known yet: the scenario's timeout
    assert probe_timeout(512, [(256, 20.0)], ceiling=600) == pytest.approx(2 * 20 * 2 + capacity_search.PROBE_SLACK_S)
    assert probe_timeout(512, [(128, 5.0), (256, 20.0)], ceiling=600) == pytest.approx(140.0)  # the largest fit
    assert probe_timeout(8192, [(256, 20.0)], ceiling=600) == 600  # never beyond the scenario's


def test_memory_edge_errors_count_as_out_of_memory_only_after_a_smaller_batch_fit():
    edge = {"status": "failed", "error": "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"}
    assert fits(Result.from_dict(edge), smaller_fit=False) is None  # at the start it may be a real error
    answer, record = judge_probe(Result.from_dict(edge), smaller_fit=True)
    assert answer is False
    assert "counted as out of memory: CUDNN_STATUS_NOT_SUPPORTED" in record.warnings[0]
    assert fits(Result.from_dict({"status": "failed", "error": "ValueError: shapes"}), smaller_fit=True) is None


def test_a_worker_that_segfaults_under_a_host_memory_limit_counts_as_out_of_memory_after_a_fit():
    # torch 2.0.1 under --memory-limit 1.5GiB: the probe at 512 died by SIGSEGV after 256 fit (CI, 2026-11-30)
    died = {"status": "failed", "error": "worker killed by signal SIGSEGV before writing a result"}
    answer, record = judge_probe(Result.from_dict(died), smaller_fit=True, host_limit=True)
    assert answer is False
    assert "killed by signal SIGSEGV under --memory-limit" in record.warnings[0]
    assert fits(Result.from_dict(died), smaller_fit=True, host_limit=False) is None  # on a GPU a crash is a crash
    assert fits(Result.from_dict(died), smaller_fit=False, host_limit=True) is None  # nothing fit yet: not an edge
    exited = {"status": "failed", "error": "worker exited with code 3 before writing a result"}
    assert fits(Result.from_dict(exited), smaller_fit=True, host_limit=True) is None


def test_the_search_finds_the_limit_and_records_its_time_peak_and_evidence():
    def script(batch, timeout):
        return ("ok", None) if batch <= 1000 else ("oom", "OutOfMemoryError: CUDA out of memory")

    runner, record = search(script, start=256, limit=16384, resolution=64)
    assert record.status == "ok" and 1000 - 64 <= record.median <= 1000
    assert record.peak_allocated_bytes == int(record.median) * 1000  # the largest fitting probe's
    assert record.checks.search_s >= 0 and record.duration_s == record.checks.search_s
    assert record.checks.failure_evidence.startswith("OutOfMemoryError")
    probes = [r for r in runner.stored if r.get("probe_of")]
    assert len(probes) == len(record.checks.probes)
    assert [b for b, _ in runner.asked][:3] == [256, 512, 1024]


def test_a_probe_that_times_out_is_tried_once_more_with_twice_the_time():
    tries = {}

    def script(batch, timeout):
        tries[batch] = tries.get(batch, 0) + 1
        if batch == 512 and tries[batch] == 1:
            return "timeout", "no result within the timeout"
        return ("ok", None) if batch <= 600 else ("oom", "CUDA out of memory")

    runner, record = search(script, start=256, limit=4096, resolution=32)
    timeouts = [t for b, t in runner.asked if b == 512]
    assert len(timeouts) == 2 and timeouts[1] == pytest.approx(2 * timeouts[0])
    assert record.status == "ok" and 600 - 32 <= record.median <= 600  # the search went on
    stored_512 = [r for r in runner.stored if r.get("probe_of") and r["params"]["batch_size"] == 512]
    assert [r["status"] for r in stored_512] == ["timeout", "ok"]  # both kept


def test_a_probe_that_times_out_twice_counts_as_not_fitting_and_says_so():
    def script(batch, timeout):
        if batch >= 1024:
            return "timeout", "no result within the timeout"
        return "ok", None

    runner, record = search(script, start=256, limit=4096, resolution=256)
    assert record.status == "ok" and record.median == 768
    assert record.checks.first_failing_batch_size == 1024
    assert any("timed out twice" in w and "counted as not fitting" in w for w in record.warnings)


def test_a_cudnn_error_at_the_edge_does_not_stop_the_search():
    def script(batch, timeout):
        if batch <= 700:
            return "ok", None
        return "failed", "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"

    _, record = search(script, start=256, limit=8192, resolution=16)
    assert record.status == "ok" and 700 - 16 <= record.median <= 700
    assert any("CUDNN_STATUS_INTERNAL_ERROR after a smaller batch fit" in w for w in record.warnings)


class MemoryRunner(ScriptedRunner):
    """Probes whose peak grows linearly with the batch on a GPU of known size; a batch fits while
    its true footprint stays under `usable` bytes (which the model, seeing only peaks, cannot know)."""

    def __init__(self, per_image: int, fixed: int, device: int, usable: int):
        self.per_image, self.fixed, self.usable = per_image, fixed, usable
        super().__init__(lambda batch, timeout: ("ok", None) if self.footprint(batch) <= usable
                         else ("oom", "OutOfMemoryError: CUDA out of memory"))
        self.device = device

    def footprint(self, batch):
        return self.fixed + self.per_image * batch

    def execute(self, spec):
        record = super().execute(spec)
        batch = spec.params["batch_size"]
        return record.updated(peak_allocated_bytes=self.footprint(batch) if record.status == "ok" else None,
                              env={"gpus": [{"index": 0, "memory_total_bytes": self.device}]})


GIB = 1 << 30


@pytest.mark.parametrize("usable_gib", [138.0, 120.0, 100.0])  # the model right, 13% and 28% optimistic
def test_the_memory_model_brings_a_two_percent_answer_in_few_probes(usable_gib):
    runner = MemoryRunner(per_image=45 << 20, fixed=600 << 20, device=141 * GIB, usable=int(usable_gib * GIB))
    outcome = find_max_batch(runner, [spec()], start=256, limit=16384, resolution="2%")
    (record,) = outcome.records
    true_limit = (runner.usable - runner.fixed) // runner.per_image
    assert record.status == "ok" and true_limit * 0.98 <= record.median <= true_limit
    assert record.checks.within_pct <= 2.0
    asked = [b for b, _ in runner.asked]
    assert asked[:2] == [256, 512] and asked[2] > 1024  # the third probe jumps to the model's limit
    assert len(asked) <= 9, asked  # doubling and bisection alone take 11 or more
    assert record.checks.predicted_limit == (140 * GIB - runner.fixed) // runner.per_image


def test_a_pessimistic_memory_model_still_reaches_the_limit():
    # the peak the model sees is twice the real footprint's growth: its prediction is half the true limit
    runner = MemoryRunner(per_image=40 << 20, fixed=500 << 20, device=141 * GIB, usable=138 * GIB)
    base_execute = runner.execute

    def execute(spec):
        record = base_execute(spec)
        if record.peak_allocated_bytes:
            record = record.updated(peak_allocated_bytes=record.peak_allocated_bytes * 2)
        return record

    runner.execute = execute
    (record,) = find_max_batch(runner, [spec()], start=256, limit=16384, resolution="2%").records
    true_limit = (runner.usable - runner.fixed) // runner.per_image
    assert true_limit * 0.98 <= record.median <= true_limit


def test_without_the_device_size_the_search_doubles_as_before():
    def script(batch, timeout):
        return ("ok", None) if batch <= 3000 else ("oom", "OutOfMemoryError: CUDA out of memory")

    runner, record = search(script, start=256, limit=16384, resolution="1%")  # no env: no memory model
    assert [b for b, _ in runner.asked][:5] == [256, 512, 1024, 2048, 4096]
    assert 2970 <= record.median <= 3000 and record.checks.predicted_limit is None


def test_a_resolution_is_images_or_a_share_of_the_answer():
    assert parse_resolution(64) == 64 and parse_resolution("64") == 64
    assert parse_resolution("2%") == "2%" and parse_resolution(" 2.5% ") == "2.5%"
    for bad in ("0%", "51%", "x%", "abc", 0, True):
        with pytest.raises(ValueError):
            parse_resolution(bad)
    assert capacity_search.tolerance(3000, "2%") == 60 and capacity_search.tolerance(10, "2%") == 1
    assert capacity_search.tolerance(3000, 64) == 64


def test_a_kernel_that_fails_past_a_size_bounds_the_answer_and_is_not_called_memory():
    tail = ("'cuLaunchKernel(function, ...)' failed with 'CUDA_ERROR_ILLEGAL_ADDRESS'\n"
            "\t [[{{node stem/bn1/moments/SquaredDifference}}]]")

    def script(batch, timeout):
        if batch <= 2674:  # 2**31 elements of the stem's activation
            return "ok", None
        return "failed", "InternalError: Graph execution error:\n\nDetected at node ...\n" + tail

    _, record = search(script, start=256, limit=16384, resolution="1%")
    assert record.status == "ok" and 2648 <= record.median <= 2674
    assert record.checks.limited_by == "kernel"
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in record.checks.failure_evidence
    assert any("not for memory" in w for w in record.warnings)
    # at the start, with nothing smaller fitting, the same error stops the search as a failure
    assert capacity_answer.fits(Result.from_dict({"status": "failed", "error": tail}), smaller_fit=False) is None


def test_a_memory_bound_answer_says_so():
    def script(batch, timeout):
        return ("ok", None) if batch <= 1000 else ("oom", "OutOfMemoryError: CUDA out of memory")

    _, record = search(script, start=256, limit=16384, resolution=64)
    assert record.checks.limited_by == "memory"
    _, capped = search(lambda b, t: ("ok", None), start=256, limit=1024, resolution=64)
    assert capped.checks.limited_by == "limit" and capped.median == 1024


def test_an_answer_whose_first_failure_passes_2_31_elements_says_memory_may_not_bind():
    # TensorFlow on an H200: every batch past 2674 images (the stem's 64 x 112 x 112 activation past 2**31
    # elements) failed in the first layer with ~48 GiB free, one of them as ResourceExhaustedError
    def script(limit):
        return lambda batch, timeout: ("ok", None) if batch <= limit else ("oom", "ResourceExhaustedError: OOM")

    _, near = search(script(2680), start=256, limit=16384, resolution="1%")
    assert near.checks.batch_past_2_31_elements == 2675  # 224 px: 2675 x 802,816 > 2**31 - 1
    assert near.checks.limited_by == "memory"
    assert any("more than 2**31 elements (from 2675 images up)" in w for w in near.warnings)
    _, past = search(script(3300), start=256, limit=16384, resolution="1%")  # torch fit past it: no such doubt
    assert past.median >= 2675 and not any("2**31" in w for w in past.warnings)
    _, far = search(script(1000), start=256, limit=16384, resolution="1%")
    assert far.checks.batch_past_2_31_elements == 2675
    assert not any("2**31" in w for w in far.warnings)


def test_a_probe_draws_few_images_and_repeats_them_in_the_run_s_shape():
    # a probe measures memory: its inputs need the run's shape and dtype, not thousands of fresh draws
    from harness.workloads.resnet50_train import (
        PROBE_DISTINCT_IMAGES,
        ResNet50Params,
        synthetic_batch,
    )

    p = ResNet50Params(batch_size=PROBE_DISTINCT_IMAGES * 2 + 5, image_size=32)
    images, labels = synthetic_batch(p, 0, probe=True)
    run_images, _ = synthetic_batch(p, 0)
    assert images.shape == run_images.shape and images.dtype == run_images.dtype == "float32"
    assert labels.shape == (p.batch_size,) and labels.dtype == "int64"
    assert (images[PROBE_DISTINCT_IMAGES] == images[0]).all() and (labels[PROBE_DISTINCT_IMAGES] == labels[0])
    assert not (run_images[PROBE_DISTINCT_IMAGES] == run_images[0]).all()  # a run's batch is all distinct
    nhwc, _ = synthetic_batch(p, 0, probe=True, channels_last=True)
    assert nhwc.shape == (p.batch_size, 32, 32, 3) and (nhwc == images.transpose(0, 2, 3, 1)).all()
    run_nhwc, _ = synthetic_batch(p, 0, channels_last=True)
    assert (run_nhwc == run_images.transpose(0, 2, 3, 1)).all() and run_nhwc.flags.c_contiguous


def test_a_backend_s_tensor_size_bound_caps_the_memory_model_s_guess():
    # TensorFlow on the H200: the memory model said 4121 images for amp_bf16 + blocks, and the probes at 3997,
    # 3597, 3237 and 2913 all failed past 2**31 elements in the stem before the search came down (2026-11-30)
    def runner_for(backend, past=("failed", "InternalError: ... 'CUDA_ERROR_ILLEGAL_ADDRESS'")):
        runner = MemoryRunner(per_image=34 << 20, fixed=600 << 20, device=141 * GIB, usable=138 * GIB)
        base = runner.script
        runner.script = lambda batch, timeout: past if batch >= 2675 else base(batch, timeout)
        (record,) = find_max_batch(runner, [replace(spec(), backend=backend)], start=256, limit=16384, resolution="2%").records
        return runner, record

    runner, record = runner_for("tensorflow")
    assert [b for b, _ in runner.asked] == [256, 512, 2674, 2675]  # the guess stops at the bound, then one past
    assert record.median == 2674 and record.checks.first_failing_batch_size == 2675
    assert record.checks.kernel_bound_batch == 2675 and record.checks.limited_by == "kernel"
    assert "at most to 2674" in record.checks.search
    # TF on the H200 said ResourceExhaustedError at 2675 with 25 GiB unused at 2674: still the kernel's bound
    _, record = runner_for("tensorflow", past=("oom", "ResourceExhaustedError: OOM when allocating tensor"))
    assert record.median == 2674 and record.checks.limited_by == "kernel"
    on_cpu = replace(spec(), backend="tensorflow", device="cpu")  # the bound is of TensorFlow's GPU kernels
    assert capacity_answer.kernel_bound(on_cpu) is None and capacity_answer.kernel_bound(replace(on_cpu, device="cuda:1")) == 2675
    runner, record = runner_for("torch")  # torch declares no bound: the model's guess as before
    assert runner.asked[2][0] > 2675 and record.checks.kernel_bound_batch is None
    assert 2648 <= record.median <= 2674


def test_past_a_pessimistic_model_s_guesses_the_search_climbs_in_tens_of_percent_not_doublings():
    # TensorFlow amp_bf16 on the H200 (2026-11-30, fifth session): the model's guesses 1962 and 2084 both fit
    # and the search doubled to 4168, then probed 3126 and 2605 (each tens of seconds) before its call ended
    runner = MemoryRunner(per_image=68 << 20, fixed=600 << 20, device=141 * GIB, usable=138 * GIB)
    base_execute = runner.execute

    def execute(spec):  # the peak the model sees grows faster than the footprint: it predicts too little
        record = base_execute(spec)
        if record.peak_allocated_bytes:
            record = record.updated(peak_allocated_bytes=int(record.peak_allocated_bytes * 1.06))
        return record

    runner.execute = execute
    (record,) = find_max_batch(runner, [replace(spec(), backend="tensorflow")], start=256, limit=16384,
                               resolution="2%").records
    true_limit = (runner.usable - runner.fixed) // runner.per_image
    asked = [b for b, _ in runner.asked]
    assert true_limit * 0.98 <= record.median <= true_limit
    assert max(asked) <= 1.1 * true_limit + 1, asked  # never a doubling past the limit
    assert max(asked) < 2675  # nor past TensorFlow's tensor-size bound
    assert len(asked) <= 8, asked


class ReservingRunner(MemoryRunner):
    """A MemoryRunner whose fitting probes report the allocator's reserved peak, as torch's worker does on a GPU:
    what is in use plus a slack that grows with the batch (fragmentation)."""

    def execute(self, spec):
        record = super().execute(spec)
        if record.status != "ok":
            return record
        return record.updated(checks={"peak_reserved_bytes": self.footprint(spec.params["batch_size"]) * 5 // 4})


def test_every_probe_trains_the_stated_steps_and_the_record_says_how_many():
    class StepsRunner(ScriptedRunner):
        def execute(self, spec):
            self.steps.append(spec.measure.steps)  # timed steps, after the first
            return super().execute(spec)

    runner = StepsRunner(lambda batch, timeout: ("ok", None) if batch <= 1000 else ("oom", "out of memory"))
    runner.steps = []
    (record,) = find_max_batch(runner, [spec()], start=256, limit=4096, resolution=64).records
    assert capacity.PROBE_STEPS >= 10  # fragmentation shows only after some steps
    assert record.checks.steps_trained == capacity.PROBE_STEPS
    assert set(runner.steps) == {capacity.PROBE_STEPS - 1} and len(runner.steps) == len(record.checks.probes)
    (record,) = find_max_batch(ScriptedRunner(runner.script), [spec()], start=256, limit=4096, resolution=64,
                               steps=25).records
    assert record.checks.steps_trained == 25 and record.to_dict()["checks"]["steps_trained"] == 25
    with pytest.raises(ValueError, match="at least 2 steps"):
        capacity.probe_measure(1)


def test_the_record_keeps_the_reserved_peak_of_its_answer_and_none_where_the_framework_keeps_none():
    runner = ReservingRunner(per_image=34 << 20, fixed=600 << 20, device=141 * GIB, usable=100 * GIB)
    (record,) = find_max_batch(runner, [spec()], start=256, limit=16384, resolution=64).records
    best = int(record.median)
    assert record.checks.peak_reserved_bytes == runner.footprint(best) * 5 // 4
    assert record.checks.peak_reserved_bytes > record.peak_allocated_bytes
    assert record.checks.limited_by == "memory" and record.checks.memory_free_bytes is None
    # on the CPU (or TensorFlow, whose memory info has no reserved figure) the worker reports none: None, not 0
    (record,) = find_max_batch(MemoryRunner(34 << 20, 600 << 20, 141 * GIB, 100 * GIB), [spec()], start=256,
                               limit=16384, resolution=64).records
    assert "peak_reserved_bytes" in record.to_dict()["checks"] and record.checks.peak_reserved_bytes is None


def test_a_search_stopped_by_a_kernel_bound_says_kernel_with_the_memory_still_free():
    runner = ReservingRunner(per_image=34 << 20, fixed=600 << 20, device=141 * GIB, usable=138 * GIB)
    base = runner.script
    runner.script = lambda batch, timeout: (("oom", "ResourceExhaustedError: OOM when allocating tensor")
                                            if batch >= 2675 else base(batch, timeout))
    (record,) = find_max_batch(runner, [replace(spec(), backend="tensorflow")], start=256, limit=16384,
                               resolution="2%").records
    assert record.median == 2674 and record.checks.limited_by == "kernel"
    reserved = runner.footprint(2674) * 5 // 4
    assert record.checks.memory_free_bytes == 141 * GIB - reserved > 20 * GIB


def test_a_scenario_states_the_steps_a_probe_trains_and_fewer_than_two_is_refused():
    from pydantic import ValidationError

    from harness.scenario.schema import CAPACITY_STEPS, Capacity

    assert Capacity().steps == CAPACITY_STEPS == capacity.PROBE_STEPS >= 10
    assert Capacity(steps=3).steps == 3
    with pytest.raises(ValidationError):
        Capacity(steps=1)
