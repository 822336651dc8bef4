#!/usr/bin/env python
"""A hand-written nanoGPT-style training loop on torch: the yardstick for harness's gpt_train on torch.

The loop nanoGPT's train.py runs, without data loading or evaluation: the GPT-2 model harness trains
(backends.torch.gpt, nanoGPT's model: importing it keeps the comparison about the loop, not the model),
torch.optim.AdamW at lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the tensors of 2+
dimensions, no clipping; one batch of synthetic tokens resident on the device; autocast for amp_bf16 /
amp_fp16 (GradScaler for fp16); optionally torch.compile of the model (`--compile`, as nanoGPT does).
Warm-up, then CUDA events around `steps` steps with a synchronize at both ends, `repeats` times. Prints one
JSON line:

    {"tokens_per_s": <median over repeats>, "samples": [...], "mfu_flops_per_token": ..., ...}

Compare with `harness run transformer --backend torch --set execution=eager` (or compiled) at the same
sizes: on a GPU the two should agree within 2%.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("gpt2", "gpt2-medium"), default="gpt2")
    parser.add_argument("--n-layer", type=int)
    parser.add_argument("--n-head", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--attention", choices=("fused", "math"), default="fused")
    parser.add_argument("--precision", choices=("fp32", "tf32", "amp_bf16", "amp_fp16"), default="amp_bf16")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model, as nanoGPT does")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu times with perf_counter)")
    return parser.parse_args(argv)


def gpt_params(args):
    """The workload's validated params for these arguments (sizes from the preset unless given)."""
    from harness.workloads.gpt_train import GPT_TRAIN

    sizes = {"n_layer": args.n_layer, "n_head": args.n_head, "d_model": args.d_model}
    return GPT_TRAIN.validate({"preset": args.preset, **{k: v for k, v in sizes.items() if v is not None},
                               "vocab_size": args.vocab_size, "seq_len": args.seq_len,
                               "batch_size": args.batch_size, "attention": args.attention})


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F

    from backends.torch.gpt import PART
    from harness.workloads.gpt_train import synthetic_batch, train_flops_per_token
    from harness.workloads.training import BuildContext

    p = gpt_params(args)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(args.seed)
    model = PART.build(p, BuildContext(seed=args.seed, framework=torch)).to(device)
    model.train()
    decayed = [t for t in model.parameters() if t.dim() >= 2]
    kept = [t for t in model.parameters() if t.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1}, {"params": kept, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    net = torch.compile(model) if args.compile else model
    ids, targets = (torch.from_numpy(a).to(device) for a in synthetic_batch(p, args.seed))
    amp_dtype = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type) if args.precision == "amp_fp16" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
            loss = F.cross_entropy(net(ids).flatten(0, 1).float(), targets.flatten())
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
    samples = []
    for _ in range(args.repeats):
        sync()
        t0 = time.perf_counter()
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        for _ in range(args.steps):
            loss = step()
        if on_gpu:
            end.record()
        sync()
        seconds = start.elapsed_time(end) / 1000.0 if on_gpu else time.perf_counter() - t0
        samples.append(args.batch_size * args.seq_len * args.steps / seconds)
    report = {"tokens_per_s": statistics.median(samples), "samples": samples,
              "mfu_flops_per_token": train_flops_per_token(p), "loss_last": float(loss.item()),
              "clock": "cuda events" if on_gpu else "perf_counter",
              "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)) if on_gpu else None,
              "settings": vars(args), "torch": torch.__version__}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
