"""Workloads are a seam like backends: registered by entry point, each backend answering for a training workload
through its trainer and the workload's model part, or `unsupported` with the reason."""

from __future__ import annotations

import pytest

from harness.seam.backend import Backend
from harness.workloads import BROKEN, WORKLOADS

PLUGINS = ("toy_train=tests.workload_plugins:TOY_TRAIN,incomplete_train=tests.workload_plugins:INCOMPLETE_TRAIN,"
           "absent_train=tests.no_such_module:ABSENT")


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setenv("HARNESS_WORKLOADS", PLUGINS)
    return WORKLOADS


def test_the_bundled_workloads_register_like_plugins():
    assert {"gemm", "resnet50_train"} <= set(WORKLOADS)
    assert WORKLOADS.source("resnet50_train") == "harness"
    assert WORKLOADS["resnet50_train"].training is not None and WORKLOADS["gemm"].training is None


def test_a_plugin_workload_is_found_and_a_broken_one_is_said_not_fatal(plugins):
    assert "toy_train" in plugins and plugins.source("toy_train") == "HARNESS_WORKLOADS"
    assert "gemm" in plugins and "absent_train" not in plugins
    assert "ModuleNotFoundError" in BROKEN["absent_train"]
    assert "lacks precision, execution, recompute, grad_accum, replicas, inputs" in BROKEN["incomplete_train"]


class Trains(Backend):
    """A backend with a trainer, named like the framework the toy workload has a part for."""

    name = "torch"
    trainer = "tests.no_trainer_needed_in_the_parent"


class TrainsToo(Trains):
    """The same, under a name the toy workload has no part for."""

    name = "tensorflow"


def test_a_backend_runs_a_training_workload_where_it_has_the_model_part(plugins):
    torch, tensorflow = Trains(), TrainsToo()
    # the part is named, not imported: the parent never imports a framework or a part
    assert torch.part_target("toy_train") == "tests.workload_plugins:NO_SUCH_PART"
    assert torch.techniques("toy_train")["precision"] == ("fp32", "tf32", "amp_fp16", "amp_bf16")
    assert "default" not in torch.techniques("toy_train")["execution"]
    assert "toy_train" in torch.workload_names() and "gemm" not in torch.workload_names()
    assert tensorflow.techniques("toy_train") is None
    reason = tensorflow.unsupported_reason("toy_train", {"precision": "fp32"}, "cpu")
    assert "no model part of it for tensorflow" in reason
    assert torch.unsupported_reason("toy_train", {"precision": "fp16"}, "cpu") == (
        "torch backend does not map precision='fp16' for toy_train")
    without_trainer = type("Untrained", (Trains,), {"trainer": None})()
    assert without_trainer.techniques("toy_train") is None


def test_harness_list_names_each_workloads_package(plugins, capsys):
    from click.testing import CliRunner

    from harness.cli import main

    out = CliRunner().invoke(main, ["list"], env={"COLUMNS": "200", "HARNESS_WORKLOADS": PLUGINS}).output
    assert "a linear classifier (tests) (from HARNESS_WORKLOADS)" in out
    assert "(from harness)" in out and "absent_train" in out and "failed to load" in out
