"""mlp_train: a multilayer perceptron classifier on synthetic features, a workload brought from outside harness.

The neutral half, written once: its parameters, its seeded batches, its optimizer, its parameter and FLOP
counts. Each framework's half is a model part beside it (torch_part, keras_part, flax_part), named in
`parts`; harness's backends train it as they train ResNet-50. Importing this package imports no framework.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from harness.workloads.base import Workload
from harness.workloads.host_inputs import host_warmup_floor
from harness.workloads.training import (
    OptimizerSpec,
    Training,
    TrainingParams,
    training_peak_precision,
    training_verdict,
)


class MLPParams(TrainingParams):
    """Parameters of mlp_train: `layers` hidden layers of `hidden` units (Linear, then ReLU), a linear classifier."""

    features: int = Field(256, ge=1, le=1_000_000)
    hidden: int = Field(512, ge=1, le=1_000_000)
    layers: int = Field(2, ge=1, le=1000)
    num_classes: int = Field(10, ge=2, le=1_000_000)
    lr: float = Field(1e-3, gt=0, le=10)
    weight_decay: float = Field(0.01, ge=0, le=1)


def widths(p: MLPParams) -> list[tuple[int, int]]:
    """(inputs, outputs) of every Linear layer, the classifier last."""
    sizes = [p.features] + [p.hidden] * p.layers + [p.num_classes]
    return list(zip(sizes, sizes[1:]))


def parameter_count(p: MLPParams) -> int:
    """Trainable parameters: every Linear layer's weights and biases."""
    return sum(n_in * n_out + n_out for n_in, n_out in widths(p))


def train_flops_per_item(p: MLPParams) -> float:
    """FLOPs of one item's training step: 2 per multiply-add, forward and backward (3 x forward)."""
    return 3.0 * 2.0 * sum(n_in * n_out for n_in, n_out in widths(p))


def synthetic_batch(p: MLPParams, seed: int, rank: int = 0, *, channels_last: bool = False, probe: bool = False,
                    batch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, features) float32 standard normal and int64 labels from (seed, rank, batch): one micro-batch,
    the same on every framework."""
    rng = np.random.default_rng([seed, rank, batch])
    features = rng.standard_normal((p.batch_size, p.features), dtype=np.float32)
    labels = rng.integers(0, p.num_classes, size=(p.batch_size,), dtype=np.int64)
    return features, labels


TRAINING = Training(
    batch=synthetic_batch,
    optimizer=lambda p: OptimizerSpec("adamw", lr=p.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=p.weight_decay,
                                      decay="matrices"),
    parameters=parameter_count,
)

MLP_TRAIN = Workload(
    name="mlp_train",
    description="multilayer perceptron classifier training step (AdamW) on synthetic features; headline samples/s "
                "(an example workload plugin: plugins/harness-mlp)",
    params_model=MLPParams,
    metric="throughput",
    unit="samples/s",
    flops_per_step=lambda p: train_flops_per_item(p) * p.batch_size * p.grad_accum * p.replicas,
    items_per_step=lambda p: float(p.batch_size * p.grad_accum * p.replicas),
    peak_precision=training_peak_precision,
    verdict=training_verdict(parameter_count),
    technique_baselines={"precision": "fp32", "execution": "eager", "recompute": "none", "inputs": "device"},
    # a record made before loss_scale existed keeps its run key
    quiet_defaults={"loss_scale": "dynamic"},
    x_param="batch_size",
    plots=("throughput_vs_x", "memory_vs_x"),
    replicas_param="replicas",
    largest_tensor_per_item=lambda p: max(p.features, p.hidden, p.num_classes),
    warmup_floor=host_warmup_floor,
    training=TRAINING,
    parts={"torch": "harness_mlp.torch_part:PART", "tensorflow": "harness_mlp.keras_part:PART",
           "jax": "harness_mlp.flax_part:PART"},
)

__all__ = ["MLP_TRAIN", "MLPParams"]
