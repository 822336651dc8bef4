#!/usr/bin/env python
"""Device memory of harness's torch ResNet-50 step against a hand-written step, at the same batch.

For each precision (fp32, amp_bf16), recompute (none, blocks: torch.utils.checkpoint per Bottleneck) and
mode (timed: cudnn.benchmark on, as a timed run; probe: as a capacity probe, cudnn.benchmark off), two fresh
processes build the same training step, one by hand (torchvision's resnet50 in channels_last, SGD with
momentum, synthetic data on the device; no part of harness imported) and one through harness's own worker
path (harness.worker.execute.measure_run with the torch backend). Both are measured alike, around their
step:

- resident_bytes: allocated before the first step (model, optimizer, inputs, whatever else is kept);
- peak_bytes: the allocator's peak over the first step and warm-up (torch.cuda.max_memory_allocated, reset
  just before the first step: what the record's peak_allocated_bytes covers);
- steady_peak_bytes: the peak over `--steps` more steps, reset after warm-up;
- reserved_peak_bytes: the caching allocator's reserved peak (what an out-of-memory error is about).

Prints one line per case, then one JSON object with every reading and harness's excess over the hand step
(`excess_pct`: (harness - hand) / hand of peak_bytes). Run on a GPU:

    python benchmarks/memory_vs_hand.py --batch-size 256
    python benchmarks/memory_vs_hand.py --batch-size 4156 --modes probe --recompute blocks --precisions fp32

On the CPU (`--device cpu`) it runs the same steps with no allocator to read (every figure null): a check
that both halves build and train.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--precisions", default="fp32,amp_bf16", help="comma-separated: fp32, tf32, amp_bf16, amp_fp16")
    parser.add_argument("--recompute", default="none,blocks", help="comma-separated: none, blocks")
    parser.add_argument("--modes", default="timed,probe", help="comma-separated: timed, probe")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda:0", help="cuda:N or cpu")
    parser.add_argument("--one", choices=("hand", "harness"), help=argparse.SUPPRESS)  # one half, in this process
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--recompute-one", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="timed", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- the measurement, the same around both steps ---------------------------------------------------------


def measure_peaks(torch, device, step, warmup: int, steps: int) -> dict:
    """Resident bytes before the first step, the peak over the first step and warm-up, the steady peak."""
    on_gpu = device.type == "cuda"

    def sync():
        if on_gpu:
            torch.cuda.synchronize(device)

    def read(name):
        return int(getattr(torch.cuda, name)(device)) if on_gpu else None

    sync()
    resident = read("memory_allocated")
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(1 + warmup):
        step()
    sync()
    peak, reserved = read("max_memory_allocated"), read("max_memory_reserved")
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(steps):
        step()
    sync()
    steady = read("max_memory_allocated")
    reserved = max(reserved, read("max_memory_reserved")) if on_gpu else None
    return {"resident_bytes": resident, "peak_bytes": peak, "steady_peak_bytes": steady,
            "reserved_peak_bytes": reserved}


# --- the hand-written step (no harness) --------------------------------------------------------------------


def hand(args) -> dict:
    """The step as a user writes it: torchvision's resnet50, channels_last, SGD with momentum, autocast."""
    import torch
    import torch.nn.functional as F
    import torch.utils.checkpoint
    import torchvision

    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = args.mode == "timed"
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=args.num_classes)
    if args.recompute_one == "blocks":
        class Checkpointed(torch.nn.Module):
            def __init__(self, block):
                super().__init__()
                self.block = block

            def forward(self, x):
                return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False, preserve_rng_state=False)

        for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
            for i in range(len(stage)):
                stage[i] = Checkpointed(stage[i])
    model = model.to(device, memory_format=torch.channels_last).train()
    images = torch.empty(args.batch_size, 3, args.image_size, args.image_size, device=device,
                         memory_format=torch.channels_last).normal_()
    labels = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type) if args.precision == "amp_fp16" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp) if amp else contextlib.nullcontext():
            loss = F.cross_entropy(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    return measure_peaks(torch, device, step, args.warmup, args.steps)


# --- harness's step, through its worker --------------------------------------------------------------------


def through_harness(args) -> dict:
    """harness's resnet50_train on torch through the worker's own path; the timed loop is replaced by
    measure_peaks around the step the backend prepared (the same readings as the hand-written half)."""
    sys.path.insert(0, str(ROOT))
    import torch

    from harness.worker import execute

    readings: dict = {}
    original = execute.run_timed

    def measured(step, clock, measure, **kwargs):
        readings.update(measure_peaks(torch, torch.device(args.device), step, args.warmup, args.steps))
        return original(step, clock, measure.model_copy(update={"warmup": 0, "steps": 1, "repeats": 1}), **kwargs)

    execute.run_timed = measured
    try:
        return _harness_run(args, readings)
    finally:
        execute.run_timed = original


def _harness_run(args, readings: dict) -> dict:
    """One resnet50_train run through measure_run; the readings measure_peaks took, the run's status and API."""
    from harness.seam.backend import RunContext, available_backends
    from harness.seam.runspec import RunSpec
    from harness.worker import execute
    from harness.worker.outcome import WorkerResult
    from harness.workloads import get_workload

    params = get_workload("resnet50_train").validate({
        "batch_size": args.batch_size, "image_size": args.image_size, "num_classes": args.num_classes,
        "precision": args.precision, "recompute": args.recompute_one, "memory_format": "channels_last",
        "execution": "eager"}).model_dump()
    spec = RunSpec(run_id="memory", session_id="memory", run_key="memory", scenario="memory_vs_hand",
                   workload="resnet50_train", backend="torch", device=args.device, params=params,
                   measure={"warmup": 0, "steps": 1, "repeats": 1}, probe=args.mode == "probe", seed=0)
    result = WorkerResult(started_at="")
    execute.measure_run(available_backends()["torch"], spec, RunContext(), result)
    return {**readings, "status": result.status, "api": (result.measured_fields() or {}).get("api")}


# --- the driver ----------------------------------------------------------------------------------------------


def one_case(args, half: str, precision: str, recompute: str, mode: str) -> dict:
    """One half of one case in a fresh process (its own CUDA context and allocator)."""
    argv = [sys.executable, __file__, "--one", half, "--precision", precision, "--recompute-one", recompute,
            "--mode", mode, "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
            "--num-classes", str(args.num_classes), "--warmup", str(args.warmup), "--steps", str(args.steps),
            "--device", args.device]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gib(value) -> str:
    return "-" if value is None else f"{value / 2**30:.2f}"


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.one:
        reading = hand(args) if args.one == "hand" else through_harness(args)
        print(json.dumps(reading))
        return reading
    cases = []
    print(f"batch {args.batch_size}, {args.image_size}x{args.image_size}, channels_last, {args.device}: GiB "
          "(resident / peak / steady peak / reserved peak), hand vs harness", flush=True)
    for mode in args.modes.split(","):
        for precision in args.precisions.split(","):
            for recompute in args.recompute.split(","):
                case = {"mode": mode, "precision": precision, "recompute": recompute}
                for half in ("hand", "harness"):
                    case[half] = one_case(args, half, precision, recompute, mode)
                h, ours = case["hand"].get("peak_bytes"), case["harness"].get("peak_bytes")
                case["excess_pct"] = 100.0 * (ours - h) / h if h and ours else None
                cases.append(case)
                line = "  ".join(
                    f"{half} " + " / ".join(gib(case[half].get(k)) for k in
                                            ("resident_bytes", "peak_bytes", "steady_peak_bytes", "reserved_peak_bytes"))
                    if "error" not in case[half] else f"{half} error: {case[half]['error'].splitlines()[-1]}"
                    for half in ("hand", "harness"))
                excess = "" if case["excess_pct"] is None else f"  excess {case['excess_pct']:+.2f}%"
                print(f"{mode:5} {precision:8} recompute={recompute:6} {line}{excess}", flush=True)
    report = {"settings": {k: v for k, v in vars(args).items() if k not in ("one", "precision", "recompute_one", "mode")},
              "cases": cases}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
