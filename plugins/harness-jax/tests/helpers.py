"""Specs as the worker hands them to the JAX backend, run in this process through the core's half of the seam."""

from __future__ import annotations

from harness.seam.backend import RunContext
from harness_jax import JaxBackend
from tests.specs import backend_spec, run_backend

TWO_BLOCKS = {"warmup": 0, "steps": 1, "repeats": 2}
ONE_BLOCK = {"warmup": 0, "steps": 1, "repeats": 1}  # the first step and one timed step
TINY_RESNET = {"batch_size": 2, "image_size": 32, "num_classes": 10}


def make_spec(workload: str, params: dict, *, measure: dict | None = None, device: str = "cpu", seed: int = 0) -> dict:
    return backend_spec("jax", workload, params, measure or TWO_BLOCKS, device=device, seed=seed)


def execute(spec: dict, ctx: RunContext | None = None) -> dict:
    return run_backend(JaxBackend(), spec, ctx)


def train(measure: dict | None = None, ctx: RunContext | None = None, **params) -> dict:
    return execute(make_spec("resnet50_train", {**TINY_RESNET, **params}, measure=measure), ctx)
