"""--document: one part of a multi-document scenario file, for a session that must fit a given time."""

from click.testing import CliRunner

from harness.cli import main


def test_document_runs_only_the_named_documents_and_refuses_an_unknown_name(tmp_path):
    store = str(tmp_path / "d.db")
    out = CliRunner().invoke(main, ["run", "frameworks", "--document", "frameworks-gemm", "--dry-run", "--store", store])
    assert out.exit_code == 0, out.output
    assert "workload=gemm" in out.output and "resnet50" not in out.output
    bad = CliRunner().invoke(main, ["run", "frameworks", "--document", "frameworks-gem", "--store", store])
    assert bad.exit_code == 2 and "--document frameworks-gem" in bad.output and "frameworks-gemm" in bad.output
    resumed = CliRunner().invoke(main, ["run", "--resume", "abc", "--document", "frameworks-gemm", "--store", store])
    assert resumed.exit_code == 2 and "--document" in resumed.output
    assert not (tmp_path / "d.db").exists()


def test_a_set_meant_for_the_named_document_is_not_checked_against_the_others(tmp_path):
    # amp_bf16 is a ResNet-50 precision, not a GEMM one: with the ResNet document named, the GEMM document is not read
    store = str(tmp_path / "d.db")
    args = ["run", "frameworks", "--set", "precision=amp_bf16", "--dry-run", "--store", store]
    one = CliRunner().invoke(main, [*args, "--document", "frameworks-resnet50"])
    assert one.exit_code == 0, one.output
    assert "precision=amp_bf16" in one.output and "workload=gemm" not in one.output
    both = CliRunner().invoke(main, args)
    assert both.exit_code == 2 and "params.precision" in both.output and "document 2" in both.output
    assert not (tmp_path / "d.db").exists()
