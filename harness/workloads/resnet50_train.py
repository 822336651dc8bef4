"""ResNet-50 training throughput: synthetic images resident on the device, SGD with momentum.

`model: resnet50` is ResNet-50 v1.5 exactly as torchvision builds it (stride on the 3x3 conv, no
conv bias): 25,557,032 trainable parameters on every backend. `keras_resnet50_v1` is Keras's
applications.ResNet50 (v1, conv bias), offered only under its own name: 25,583,592 trainable
parameters (Keras's summary says 25,636,712 "Total params", which adds 53,120 BatchNorm moving
statistics; torchvision keeps those as buffers, not parameters, so trainable is the count that
compares like with like).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, StrictInt, ValidationInfo, field_validator

from harness.workloads.base import Execution, Params, Workload
from harness.workloads.host_inputs import host_warmup_floor
from harness.workloads.training import (
    OptimizerSpec,
    Training,
    checked_loss_scale,
    training_peak_precision,
    training_verdict,
)

#: Trainable parameters of each model at 1000 classes (torchvision resnet50; keras ResNet50).
MODEL_PARAMETERS = {"resnet50": 25_557_032, "keras_resnet50_v1": 25_583_592}

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, stride of first block
EXPANSION = 4


class ResNet50Params(Params):
    """Parameters of resnet50_train."""

    model: Literal["resnet50", "keras_resnet50_v1"] = "resnet50"
    batch_size: int = Field(32, ge=1, le=65536)
    image_size: int = Field(224, ge=32, le=2048)
    num_classes: int = Field(1000, ge=2, le=1_000_000)
    precision: Literal["fp32", "tf32", "amp_fp16", "amp_bf16"] = "fp32"
    memory_format: Literal["channels_first", "channels_last"] = "channels_first"
    recompute: Literal["none", "blocks"] = "none"
    execution: Execution = "eager"
    grad_accum: int = Field(1, ge=1, le=1024)
    lr: float = Field(0.01, gt=0, le=10)
    momentum: float = Field(0.9, ge=0, lt=1)
    #: Data-parallel replicas (docs/distributed.md): torch DistributedDataParallel through torchrun,
    #: TensorFlow MultiWorkerMirroredStrategy, one process per replica. batch_size is per replica;
    #: the headline counts every replica's images (global images/s). Strict: `true` or "2" is refused.
    replicas: StrictInt = Field(1, ge=1, le=1024)
    #: Where the step's batches come from (docs/workloads.md): `device`, one synthetic batch resident on the
    #: device; `host`, harness.workloads.host_inputs.HOST_BATCHES distinct batches in host memory fed through the framework's own input
    #: pipeline, one batch copied to the device per step.
    inputs: Literal["device", "host"] = "device"
    #: amp_fp16's loss scaling (harness.workloads.training.TrainingParams.loss_scale): `dynamic` or `static`
    loss_scale: Literal["dynamic", "static"] = "dynamic"

    @field_validator("loss_scale")
    @classmethod
    def _loss_scale_with_amp_fp16(cls, value: str, info: ValidationInfo) -> str:
        return checked_loss_scale(value, info)


def parameter_count(num_classes: int = 1000, model: str = "resnet50") -> int:
    """Trainable parameters of the model with `num_classes` outputs (BatchNorm gamma and beta included)."""
    base = MODEL_PARAMETERS[model]
    return base - 1000 * 2049 + num_classes * 2049


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def forward_macs(image_size: int = 224, num_classes: int = 1000) -> int:
    """Multiply-adds of one forward pass of ResNet-50 v1.5 for one image (convolutions and the classifier)."""
    h = _conv_out(image_size, 7, 2, 3)
    macs = 3 * 64 * 49 * h * h
    h = _conv_out(h, 3, 2, 1)  # max pool
    cin = 64
    for width, blocks, stride in STAGES:
        for i in range(blocks):
            s = stride if i == 0 else 1
            h_out = _conv_out(h, 3, s, 1)
            macs += cin * width * h * h  # 1x1 reduce, stride 1
            macs += width * width * 9 * h_out * h_out  # 3x3, stride s (v1.5)
            macs += width * width * EXPANSION * h_out * h_out  # 1x1 expand
            if i == 0:
                macs += cin * width * EXPANSION * h_out * h_out  # projection shortcut
            cin = width * EXPANSION
            h = h_out
    macs += cin * num_classes
    return macs


def train_flops_per_image(image_size: int = 224, num_classes: int = 1000) -> float:
    """FLOPs of one training step per image: 2 FLOPs per multiply-add, training = 3 x forward."""
    return 3.0 * 2.0 * forward_macs(image_size, num_classes)


#: Distinct images a capacity probe draws; its batch repeats them. A probe's inputs only need the run's
#: shape and dtype (memory is what it measures), and drawing thousands of normal images costs seconds each
#: time (about 2.5 s per 1024 at 224 px on one core), in every probe.
PROBE_DISTINCT_IMAGES = 64


def synthetic_batch(p: ResNet50Params, seed: int, rank: int = 0, *, channels_last: bool = False,
                    probe: bool = False, batch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, H, W) float32 standard normal and int64 labels, from the scenario's seed.

    One micro-batch of batch_size images; every backend converts it to its own layout, or asks for
    (N, H, W, 3) with `channels_last`. Replica `rank` of a data-parallel run draws its own batch from
    (seed, rank); rank 0 draws what a one-replica run draws, so its inputs_fingerprint matches the
    1-replica configuration's. A capacity `probe` draws PROBE_DISTINCT_IMAGES images and repeats them.
    Batch `batch` of a host dataset (inputs: host) draws from (seed, rank, batch); batch 0 is the device batch.
    """
    rng = np.random.default_rng([seed, rank, batch] if batch else seed if rank == 0 else [seed, rank])
    drawn = min(p.batch_size, PROBE_DISTINCT_IMAGES) if probe else p.batch_size
    images = rng.standard_normal((drawn, 3, p.image_size, p.image_size), dtype=np.float32)
    labels = rng.integers(0, p.num_classes, size=(drawn,), dtype=np.int64)
    if channels_last:
        images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    if drawn < p.batch_size:
        reps = -(-p.batch_size // drawn)
        images = np.tile(images, (reps,) + (1,) * (images.ndim - 1))[:p.batch_size]
        labels = np.tile(labels, reps)[:p.batch_size]
    return images, labels


RESNET50_TRAIN = Workload(
    name="resnet50_train",
    description=("ResNet-50 v1.5 training step (SGD with momentum) on synthetic data, on the device or fed from "
                 "host memory; headline images/s"),
    params_model=ResNet50Params,
    metric="throughput",
    unit="images/s",
    # one step = grad_accum micro-batches of batch_size images on each of `replicas` replicas (global)
    flops_per_step=lambda p: train_flops_per_image(p.image_size, p.num_classes) * p.batch_size * p.grad_accum * p.replicas,
    items_per_step=lambda p: float(p.batch_size * p.grad_accum * p.replicas),
    peak_precision=training_peak_precision,
    verdict=training_verdict(lambda p: parameter_count(p.num_classes, p.model), model=lambda p: p.model),
    technique_baselines={"precision": "fp32", "execution": "eager", "recompute": "none",
                         "memory_format": "channels_first", "inputs": "device"},
    x_param="batch_size",
    plots=("throughput_vs_x", "memory_vs_x"),
    replicas_param="replicas",
    # `inputs` came after records existed: at `device` (what they all ran) it stays out of the run key
    quiet_defaults={"replicas": 1, "inputs": "device", "loss_scale": "dynamic"},
    # the stem's 64 x H/2 x W/2 activation (layer1's output, 256 x H/4 x W/4, is as large)
    largest_tensor_per_item=lambda p: 64 * _conv_out(p.image_size, 7, 2, 3) ** 2,
    warmup_floor=host_warmup_floor,
    training=Training(
        batch=synthetic_batch,
        optimizer=lambda p: OptimizerSpec("sgd", lr=p.lr, momentum=p.momentum),
        parameters=lambda p: parameter_count(p.num_classes, p.model),
        images=True,
    ),
)
