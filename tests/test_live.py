"""Progress inside a run: the runner reads the worker's progress events while it waits,
`harness run` shows them (a live line on a terminal, plain lines elsewhere, nothing with -q), and a
session says what to expect before it starts (an estimate from earlier runs, a GPU-sized session
on the CPU)."""

import io
import os
import time
from pathlib import Path

import numpy as np
import pytest

from harness.results.record import Result
from harness.results.store import open_store
from harness.seam.adapter import Prepared
from harness.session.plan import RunSpec, run_key
from harness.session.progress import ProgressReader
from harness.session.runner import Runner
from tests.fake_backend import FakeBackend

ROOT = Path(__file__).resolve().parent.parent
PARAMS = {"size": 64, "m": None, "n": None, "k": None, "batch": 1, "precision": "fp32", "execution": "eager"}


class SlowBackend(FakeBackend):
    """Each step sleeps `seconds`; once the file `marker` exists, the step count at which it first
    appeared is noted in the checks: the parent wrote it after an event, while this worker ran."""

    name = "slow"
    aliases = ()

    def prepare(self, workload, params, device, run):
        options = run.options
        state = {"steps": 0, "seen_at": None}

        def step():
            time.sleep(options["seconds"])
            state["steps"] += 1
            if state["seen_at"] is None and options["marker"] and os.path.exists(options["marker"]):
                state["seen_at"] = state["steps"]
            return np.ones(1)

        return Prepared(step=step, api={"precision": "time.sleep"},
                        checks=lambda: {"correct": True, "marker_seen_at_step": state["seen_at"],
                                        "steps_run": state["steps"]})


@pytest.fixture
def slow_backend(monkeypatch):
    monkeypatch.setenv("HARNESS_BACKENDS", "fake=tests.fake_backend:FakeBackend,slow=tests.test_live:SlowBackend")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return "slow"


def _spec(backend="slow", *, warmup=1, steps=2, repeats=4, timeout_s=120.0, **options) -> RunSpec:
    return RunSpec(run_id=f"r-{time.monotonic_ns()}", session_id="s1",
                   run_key=run_key("t", "gemm", backend, "cpu", PARAMS, options), scenario="t", workload="gemm",
                   backend=backend, device="cpu", params=dict(PARAMS),
                   measure={"warmup": warmup, "steps": steps, "repeats": repeats, "timeout_s": timeout_s}, seed=0,
                   options=options)


# ------------------------------------------------------------------------------- reading the file
def test_the_reader_returns_whole_new_lines_only_and_skips_what_is_not_an_event(tmp_path):
    path = tmp_path / "p.jsonl"
    reader = ProgressReader(path)
    assert reader.read() == []  # no file yet
    path.write_text('{"phase": "first_step", "steps": 2}\nnot json\n[1, 2]\n{"phase": "warm', encoding="utf-8")
    assert reader.read() == [{"phase": "first_step", "steps": 2}]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('up", "first_step_s": 1.5}\n')
    assert reader.read() == [{"phase": "warmup", "first_step_s": 1.5}]  # the line finished, read once
    assert reader.read() == []


# ------------------------------------------------------------------------- the runner, while it waits
def test_the_runner_hands_each_event_over_while_the_worker_still_runs(tmp_path, slow_backend):
    marker = tmp_path / "parent-saw-a-block"
    events = []

    def on_progress(spec, event):
        events.append(event)
        if event["phase"] == "block" and not marker.exists():
            marker.write_text("seen", encoding="utf-8")

    with open_store(tmp_path / "s.db") as store:
        runner = Runner(store, on_progress=on_progress)
        record = runner.execute(_spec(seconds=0.25, repeats=6, marker=str(marker)))
    assert record.status == "ok", record.error
    assert [e["phase"] for e in events] == ["first_step", "warmup"] + ["block"] * 6
    assert [e["block"] for e in events[2:]] == [1, 2, 3, 4, 5, 6]
    assert events[0]["steps"] == 2 and events[0]["repeats"] == 6 and events[1]["warmup"] == 1
    last = events[-1]
    assert last["repeats"] == 6 and last["rate"] > 0 and last["block_s"] > 0
    # the worker saw the parent's answer to an early block before its own last step: read live,
    # not after the worker had left
    seen, total = record.checks.marker_seen_at_step, record.checks.steps_run
    assert seen is not None and seen < total


def test_events_before_a_timeout_are_handed_over_and_the_timeout_still_holds(tmp_path, slow_backend):
    events = []
    with open_store(tmp_path / "t.db") as store:
        runner = Runner(store, on_progress=lambda spec, event: events.append(event["phase"]))
        started = time.monotonic()
        record = runner.execute(_spec(seconds=0.5, steps=1, repeats=100, timeout_s=3.0))
    assert record.status == "timeout" and "no result within 3 s" in record.error
    assert time.monotonic() - started >= 3.0  # not before its time
    assert events[:2] == ["first_step", "warmup"] and "block" in events


def test_a_display_that_fails_does_not_fail_the_run(tmp_path, fake_backend):
    def broken(spec, event):
        raise ValueError("display broke")

    with open_store(tmp_path / "b.db") as store:
        record = Runner(store, on_progress=broken).execute(_spec("fake", action="ok"))
    assert record.status == "ok"


# ------------------------------------------------------------------------------------- the display
def _events():
    spec = _spec("fake", repeats=3)
    return spec, [{"phase": "first_step", "steps": 2, "repeats": 3, "warmup": 1},
                  {"phase": "warmup", "first_step_s": 2.5, "warmup": 1},
                  {"phase": "block", "block": 1, "repeats": 3, "max_repeats": 3, "block_s": 20.0, "rate": 0.0412},
                  {"phase": "block", "block": 3, "repeats": 3, "max_repeats": 3, "block_s": 20.0, "rate": 0.0415}]


def test_plain_lines_when_stderr_is_not_a_terminal():
    from harness.present.live import Progress

    out = io.StringIO()
    shown = Progress(stream=out, live=False)
    spec, events = _events()
    shown.start(2, 5, spec)
    for event in events:
        shown.progress(spec, event)
    shown.result(2, 5, Result(status="ok", median=0.0414, unit="TFLOP/s", duration_s=70.0))
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert lines[0].startswith("[2/5] fake on cpu: gemm")
    assert lines[1] == "[2/5] first step done in 2.5 s; warm-up: 1 step(s)"
    assert lines[2] == "[2/5] block 1 of 3: 0.0412 TFLOP/s so far, about 40 s left"  # 2 blocks x 20 s
    assert lines[3] == "[2/5] block 3 of 3: 0.0415 TFLOP/s so far"
    assert lines[4] == "[2/5] ok 0.0414 TFLOP/s in 70.0 s"


def test_progress_lines_name_their_own_run_when_several_run_at_once():
    # under --executor slurm several jobs run at once: a line names the run it is about, not the last started
    from dataclasses import replace

    from harness.present.live import Progress

    out = io.StringIO()
    shown = Progress(stream=out, live=False)
    spec, events = _events()
    other = replace(spec, run_id="another-run")
    shown.start(1, 2, spec)
    shown.start(2, 2, other)
    shown.progress(spec, events[1])
    shown.progress(other, events[1])
    lines = out.getvalue().splitlines()
    assert lines[2] == "[1/2] first step done in 2.5 s; warm-up: 1 step(s)"
    assert lines[3] == "[2/2] first step done in 2.5 s; warm-up: 1 step(s)"


def test_one_live_line_rewritten_in_place_on_a_terminal():
    from harness.present.live import Progress

    out = io.StringIO()
    shown = Progress(stream=out, live=True, width=200)
    spec, events = _events()
    shown.start(1, 1, spec)
    for event in events:
        shown.progress(spec, event)
    text = out.getvalue()
    assert text.count("\n") == 1  # only the run's own line; the status is rewritten, never scrolled
    for phase in ("starting", "first step", "warm-up: 1 step(s) (first step done in 2.5 s)",
                  "block 1 of 3: 0.0412 TFLOP/s so far, about 40 s left"):
        assert f"\r[1/1] {phase}" in text, phase
    shown.result(1, 1, Result(status="ok", median=0.0414, unit="TFLOP/s", duration_s=70.0))
    assert out.getvalue().endswith("\r\x1b[K[1/1] ok 0.0414 TFLOP/s in 70.0 s\n")  # the status line cleared first
    narrow = io.StringIO()
    small = Progress(stream=narrow, live=True, width=30)
    small.start(1, 1, spec)
    small.progress(spec, events[2])
    assert all(len(part.split("\x1b")[0]) < 30 for part in narrow.getvalue().split("\r")[1:])  # never wraps


def test_adaptive_blocks_say_at_most_how_long_is_left():
    from harness.present.live import describe_event

    spec = _spec("fake")
    event = {"phase": "block", "block": 5, "repeats": 5, "max_repeats": 50, "block_s": 1.0, "rate": 3.0}
    assert describe_event(spec, event, live=False) == \
        "block 5 (at least 5, at most 50): 3 TFLOP/s so far, at most 45 s left"


def test_run_shows_progress_lines_in_a_log_and_none_with_quiet(tmp_path, fake_backend, write_scenario, harness_cli):
    path = write_scenario({"name": "p", "workload": "gemm", "params": {"size": 32},
                           "measure": {"warmup": 1, "steps": 2, "repeats": 2, "processes": 1},
                           "backends": ["fake"], "devices": ["cpu"]})
    code, out, err = harness_cli("run", path, "--store", "p.db")
    assert code == 0, err
    assert "[1/1] first step done in" in err and "[1/1] block 1 of 2: " in err and "TFLOP/s so far" in err
    assert "\r" not in err
    code, out, err = harness_cli("run", path, "--store", "p.db", "-q")
    assert code == 0, err
    assert "block" not in err and "first step" not in err and "[1/1]" not in err
    assert "estimate: about" in err  # the same configuration ran before in this store


# ------------------------------------------------------------------------------ before a session
def _plan(workload="resnet50_train", device="auto", runs=8, **params):
    from harness.workloads import WORKLOADS

    full = WORKLOADS[workload].validate(params).model_dump()
    measure = {"warmup": 10, "steps": 20, "repeats": 5, "timeout_s": 1200}
    return [RunSpec(run_id=f"r{i}", session_id="s", run_key=f"k{i % 2}", scenario="x", workload=workload,
                    backend="torch", device=device, params=full, measure=measure, seed=0, replicate=i // 2)
            for i in range(runs)]


def test_an_estimate_comes_from_earlier_runs_of_the_same_configurations(monkeypatch):
    from harness.machine import nvml
    from harness.present.live import forecast_lines
    from harness.session.forecast import forecast

    monkeypatch.setattr(nvml, "gpus", lambda: [{"index": 0}])
    plan = _plan(runs=4)
    assert forecast(plan, []).known_s is None and forecast_lines(forecast(plan, [])) == []  # nothing to go by
    earlier = [Result(run_key="k0", duration_s=100.0), Result(run_key="k0", duration_s=120.0),
               Result(run_key="k1", duration_s=60.0), Result(run_key="k1", duration_s=0.0)]
    whole = forecast(plan, earlier)
    assert (whole.known_s, whole.known_runs, whole.runs, whole.earlier_runs) == (340.0, 4, 4, 3)  # 2 x 110 s + 2 x 60 s
    (line,) = forecast_lines(whole)
    assert line.startswith("estimate: about 6 min for 4 run(s)")
    part = forecast(plan, earlier[:2])
    assert (part.known_s, part.known_runs) == (220.0, 2)
    (text,) = forecast_lines(part)
    assert "for the 2 of 4 run(s)" in text and "no earlier run" in text


def test_a_gpu_sized_session_on_the_cpu_is_warned_about_with_a_range(monkeypatch):
    from harness.machine import nvml
    from harness.present.live import forecast_lines
    from harness.session.forecast import forecast, session_work_tflop

    plan = _plan(batch_size=32, image_size=224)
    work = session_work_tflop(plan)
    per_step = 24.5e9 * 32  # ResNet-50 training at 224 px: 24.5 GFLOP an image (README)
    assert work == pytest.approx(8 * per_step * (1 + 10 + 20 * 5) / 1e12, rel=0.02)
    monkeypatch.setattr(nvml, "gpus", lambda: [])
    assert forecast(plan, []).cpu_work_tflop == pytest.approx(work)
    (warning,) = forecast_lines(forecast(plan, []))
    assert warning.startswith("warning: no GPU is visible") and f"about {work:,.0f} TFLOP" in warning
    assert f"{work / 0.5 / 3600:.1f}-{work / 0.1 / 3600:.1f} hours" in warning and "estimate" in warning
    assert forecast(_plan(device="cuda:0"), []).cpu_work_tflop is None  # asked for a GPU: not a CPU session
    assert forecast(_plan(batch_size=2, image_size=32, runs=2), []).cpu_work_tflop is None  # small: nothing to warn of
    monkeypatch.setattr(nvml, "gpus", lambda: [{"index": 0}])
    assert forecast(plan, []).cpu_work_tflop is None  # a GPU is there


def test_dry_run_warns_before_a_gpu_sized_session_on_the_cpu(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from harness.cli import main
    from harness.machine import nvml

    monkeypatch.setattr(nvml, "gpus", lambda: [])
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "resnet50_train", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "warning: no GPU is visible" in result.output and "hours" in result.output
    assert not (tmp_path / "harness.db").exists()


# --------------------------------------------------------------------- a wait for the host's timing lock
HOLDER = ("pid 4242 (harness run quickstart --set size=256 --set measure.processes=1 -q --store "
          "/home/someone/benchmarks/results/harness.db), run torch gemm on cpu, session 0123456789abcdef")


@pytest.mark.parametrize("width", (80, 100, 120))
def test_a_lock_wait_is_shown_within_the_width_and_its_run_time_leaves_it_out(width):
    from harness.present.live import Progress
    from harness.results.parts import PhaseSeconds

    spec, _ = _events()
    waiting = {"phase": "host_lock", "waiting": True, "holder": HOLDER, "lock": "/tmp/harness-timing.lock"}
    live = io.StringIO()
    shown = Progress(stream=live, live=True, width=width)
    shown.start(1, 1, spec)
    shown.progress(spec, waiting)
    status = live.getvalue().split("\r")[-1].split("\x1b")[0]
    assert status.startswith("[1/1] waiting for the host timing lock, held by") and len(status) < width
    log = io.StringIO()
    shown = Progress(stream=log, live=False, width=width)
    shown.start(1, 1, spec)
    shown.progress(spec, waiting)
    shown.progress(spec, {"phase": "host_lock", "waiting": False, "waited_s": 113.6})
    record = Result(status="ok", median=0.04, unit="TFLOP/s", duration_s=114.4,
                    phases_s=PhaseSeconds(steps=0.5, lock_wait=113.6))
    shown.result(1, 1, record)
    lines = log.getvalue().splitlines()
    assert all(len(line) <= width for line in lines), lines
    assert "pid 4242 (harness run quickstart" in " ".join(log.getvalue().split())
    assert "got the host's timing lock after 2 min" in lines[-2]
    assert lines[-1] == "[1/1] ok 0.04 TFLOP/s in 0.8 s (+114 s waiting for the lock)"


def test_quiet_still_says_a_lock_wait_in_one_line(monkeypatch, capsys):
    from harness.present.live import LiveDisplay

    monkeypatch.setenv("COLUMNS", "80")
    spec, _ = _events()
    shown = LiveDisplay(quiet=True)
    shown.run_progress(spec, {"phase": "block", "block": 1, "repeats": 3, "rate": 1.0})
    shown.run_progress(spec, {"phase": "host_lock", "waiting": True, "holder": HOLDER})
    shown.run_progress(spec, {"phase": "host_lock", "waiting": False, "waited_s": 3.0})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 80 and "held by pid 4242 (harness run" in lines[0]


def test_the_run_time_of_sessions_and_estimates_leave_lock_waits_out(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main
    from harness.results.parts import PhaseSeconds
    from harness.session.forecast import Durations

    waited = Result(run_id="a", run_key="k", session_id="s1", status="ok", duration_s=150.0,
                    phases_s=PhaseSeconds(steps=30.0, lock_wait=120.0))
    plain = Result(run_id="b", run_key="k", session_id="s1", status="ok", duration_s=30.0)
    assert waited.run_s == 30.0 and plain.run_s == 30.0
    assert Durations([waited, plain]).of("k") == [30.0, 30.0]
    with open_store(tmp_path / "w.db") as store:
        store.begin_session("s1", [], scenario_path="x.yaml", command="harness run x.yaml")
        store.add(waited)
        store.add(plain)
    out = CliRunner().invoke(main, ["results", "--store", str(tmp_path / "w.db"), "--sessions", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert '"run_s": 60.0' in out.output and '"run time": "60 s"' in out.output  # not 180 s
