#!/usr/bin/env python
"""A minimal hand-written ResNet-50 training loop: the yardstick for harness's own overhead.

Everything a careful person would write by hand and nothing more: torchvision's resnet50, SGD with
momentum, synthetic data resident on the device, cudnn.benchmark, warm-up, then CUDA events around
`steps` steps with a synchronize at both ends, `repeats` times. TF32 is off unless asked for, as
in harness's fp32. It does not import harness. Prints one JSON line:

    {"images_per_s": <median over repeats>, "samples": [...], "wall_images_per_s": [...], ...}

Compare with `harness run` on the same settings (resnet50_train, eager): the two should agree
within 3% (harness vs this loop on an H200: 842 vs 844 images/s at batch 32 fp32, 4712 vs 4720 at batch 256 amp_bf16
channels_last, 5642 vs 5728 amp_fp16). Below about batch 32 a step is bound by the host's launch
rate and both vary by 20% or more from block to block.

`--precision fp32` is true fp32 (cuDNN TF32 off). torch's defaults leave cuDNN's TF32 on, so a loop
written without touching the flags, such as those behind the published "fp32" ResNet-50 rows, is
what `--precision tf32` measures (2218 images/s at batch 256 on an H200, against the reference figure 2201;
at batch 32 the GPU needs 18 ms a step and the host about as long to launch it: 1562-1770).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--precision", choices=("fp32", "tf32", "amp_bf16", "amp_fp16"), default="fp32")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu times with perf_counter)")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F
    import torchvision

    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32

    model = torchvision.models.resnet50(num_classes=args.num_classes).to(device)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    amp_dtype = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    scaler = None
    if args.precision == "amp_fp16":
        scaler = torch.amp.GradScaler(device.type) if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

    def autocast():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss

    def sync():
        if on_gpu:
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    sync()

    samples, wall_samples = [], []
    for _ in range(args.repeats):
        sync()
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        if on_gpu:
            end.record()
        sync()
        wall = time.perf_counter() - t0
        images_done = args.batch_size * args.steps
        wall_samples.append(images_done / wall)
        samples.append(images_done / (start.elapsed_time(end) / 1000.0) if on_gpu else images_done / wall)

    report = {
        "images_per_s": statistics.median(samples),
        "samples": samples,
        "wall_images_per_s": wall_samples,
        "clock": "cuda events" if on_gpu else "perf_counter",
        "loss_last": float(loss.item()),
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)) if on_gpu else None,
        "settings": vars(args),
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if on_gpu else "cpu",
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
