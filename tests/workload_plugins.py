"""Workloads a test registers through HARNESS_WORKLOADS, as a package's `harness.workloads` entry point would."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from harness.workloads.base import Params, Workload
from harness.workloads.training import OptimizerSpec, Training, TrainingParams


class ToyParams(TrainingParams):
    """A linear classifier's parameters."""

    features: int = Field(8, ge=1, le=1024)
    classes: int = Field(3, ge=2, le=100)


def toy_batch(p, seed, rank=0, *, channels_last=False, probe=False, batch=0):
    """Features and labels of one micro-batch from (seed, rank, batch)."""
    rng = np.random.default_rng([seed, rank, batch])
    return (rng.standard_normal((p.batch_size, p.features), dtype=np.float32),
            rng.integers(0, p.classes, size=(p.batch_size,), dtype=np.int64))


TOY_TRAIN = Workload(
    name="toy_train", description="a linear classifier (tests)", params_model=ToyParams, metric="throughput",
    unit="items/s", flops_per_step=lambda p: None, items_per_step=lambda p: float(p.batch_size),
    peak_precision=lambda p: "fp32", technique_baselines={"precision": "fp32", "execution": "eager"},
    training=Training(batch=toy_batch, optimizer=lambda p: OptimizerSpec("sgd", lr=0.1)),
    parts={"torch": "tests.workload_plugins:NO_SUCH_PART"},
)


class LacksTechniques(Params):
    """A training workload's parameters without the techniques a trainer reads."""

    batch_size: int = 4


INCOMPLETE_TRAIN = Workload(
    name="incomplete_train", description="a training workload without its techniques (tests)",
    params_model=LacksTechniques, metric="throughput", unit="items/s", flops_per_step=lambda p: None,
    items_per_step=lambda p: 1.0, peak_precision=lambda p: "fp32",
    training=Training(batch=toy_batch, optimizer=lambda p: OptimizerSpec("sgd", lr=0.1)),
)
