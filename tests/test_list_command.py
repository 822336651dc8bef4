"""`harness list` describes every scenario of a file that holds several (one session, several workloads)."""

from click.testing import CliRunner

import harness.scenario.bundled
from harness.cli import main

TWO = """name: pair-gemm
description: a matrix product on two GPUs
workload: gemm
params: {size: 2048}
---
name: pair-resnet
description: ResNet-50 training at batch 32 on two GPUs
workload: resnet50_train
"""
ONE = "name: single\ndescription: one product\nworkload: gemm\nparams: {size: 64}\n"


def test_list_names_each_document_of_a_multi_scenario_file(tmp_path, monkeypatch):
    (tmp_path / "pair.yaml").write_text(TWO, encoding="utf-8")
    (tmp_path / "single.yaml").write_text(ONE, encoding="utf-8")
    monkeypatch.setattr(harness.scenario.bundled, "scenarios_dir", lambda: tmp_path)
    result = CliRunner().invoke(main, ["list"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index(next(line for line in lines if line.strip().startswith("pair ")))
    assert lines[start].split() == ["pair", "2", "scenarios", "in", "one", "session", "(gemm,", "resnet50_train):"]
    assert lines[start + 1].strip() == "gemm: a matrix product on two GPUs"
    assert lines[start + 2].strip() == "resnet50_train: ResNet-50 training at batch 32 on two GPUs"
    assert any(line.split()[:2] == ["single", "gemm:"] for line in lines)
