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
