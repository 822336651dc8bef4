"""`harness report` on synthetic stored results: HTML with embedded plots, Markdown with PNG files beside it."""

import base64
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import InputError
from harness.present.report import markdown_table, write_report
from tests.test_compare import make_record, store_records

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DATA_URI = re.compile(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
MD_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def resnet_records():
    records, seed = [], 0
    for backend, scale in (("torch", 1.0), ("tensorflow", 0.9)):
        for batch_size in (32, 64, 128):
            for precision, speedup in (("fp32", 1.0), ("amp_bf16", 2.4)):
                seed += 1
                records.append(make_record(1000 * scale * speedup * batch_size / 64, backend=backend,
                                           batch_size=batch_size, precision=precision, seed=seed))
        seed += 1
        records.append(make_record(1150 * scale, backend=backend, execution="graph", seed=seed))
    records.append(make_record(backend="torch", batch_size=1024, status="oom"))
    return records


def gemm_records():
    return [
        make_record(30.0, workload="gemm", device_name="NVIDIA RTX A6000", seed=101),
        make_record(62.0, workload="gemm", device_name="NVIDIA GeForce RTX 4090", seed=102, noise=0.08),
        make_record(45.0, workload="gemm", device_name="NVIDIA RTX A6000", precision="tf32", seed=103),
    ]


def report(tmp_path, records):
    path = store_records(tmp_path / "h.db", records)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["report", "--store", path, "--output", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out, (out / "report.html").read_text(encoding="utf-8"), (out / "report.md").read_text(encoding="utf-8")


# drawing the plots takes a second or two: each kind of store is reported once per module
@pytest.fixture(scope="module")
def both(tmp_path_factory):
    return report(tmp_path_factory.mktemp("both"), resnet_records() + gemm_records())


@pytest.fixture(scope="module")
def gemm_only(tmp_path_factory):
    return report(tmp_path_factory.mktemp("gemm"), gemm_records())


@pytest.fixture(scope="module")
def resnet_only(tmp_path_factory):
    return report(tmp_path_factory.mktemp("resnet"), resnet_records())


def embedded_pngs(html):
    return [base64.b64decode(data) for data in DATA_URI.findall(html)]


def linked_pngs(folder: Path, markdown):
    links = MD_IMAGE.findall(markdown)
    return {link: (folder / link).read_bytes() for link in links}


def test_html_embeds_every_plot_as_a_png_data_uri(both):
    _, html, _ = both
    pngs = embedded_pngs(html)
    # torch against tensorflow, throughput, memory, gemm against peak, technique speedups
    assert len(pngs) == 5
    assert all(png.startswith(PNG_MAGIC) for png in pngs)
    assert "<img" in html and "src=\"data:image/png;base64," in html
    assert "src=\"http" not in html and ".png\"" not in html  # self-contained


def test_markdown_links_png_files_that_exist_beside_it(both):
    out, _, markdown = both
    pngs = linked_pngs(out, markdown)
    assert set(pngs) == {"frameworks_resnet50_train.png", "resnet50_train_throughput_vs_batch_size.png",
                         "resnet50_train_memory_vs_batch_size.png", "technique_speedups.png", "gemm_tflops_vs_peak.png"}
    assert all(png.startswith(PNG_MAGIC) for png in pngs.values())


def test_report_with_only_gemm_and_one_backend_draws_only_its_plots_and_says_why(gemm_only):
    out, html, markdown = gemm_only
    assert "gemm: only torch measured here; nothing to compare it with" in markdown
    assert "nothing to compare it with" in html
    assert "resnet50_train" not in markdown
    assert set(linked_pngs(out, markdown)) == {"gemm_tflops_vs_peak.png", "technique_speedups.png"}  # fp32 vs tf32
    assert len(embedded_pngs(html)) == 2


def test_report_with_only_resnet_has_no_gemm_section(resnet_only):
    out, html, markdown = resnet_only
    assert "## gemm" not in markdown and "gemm_tflops_vs_peak.png" not in markdown
    assert set(linked_pngs(out, markdown)) == {"frameworks_resnet50_train.png", "resnet50_train_throughput_vs_batch_size.png",
                                               "resnet50_train_memory_vs_batch_size.png", "technique_speedups.png"}
    assert len(embedded_pngs(html)) == 4
    assert "Only one device in these results: no device ratios." in markdown


def test_technique_speedups_are_tabulated_against_their_baselines(resnet_only):
    _, _, markdown = resnet_only
    assert "compared: precision" in markdown and "compared: execution" in markdown
    assert "| fp32 | amp_bf16 |" in markdown
    assert "| eager | graph |" in markdown


def test_device_ratios_stand_beside_datasheet_ratios(gemm_only):
    _, html, markdown = gemm_only
    assert "RTX 4090 / RTX A6000 fp32: 82.6 / 38.7 = 2.13" in markdown
    assert "RTX 4090 / RTX A6000 fp32: 82.6 / 38.7 = 2.13" in html


def test_every_records_warning_and_failure_is_listed(both):
    _, html, markdown = both
    assert re.search(r"RTX 4090 \(cuda:0\)[^:]*: CV \d+\.\d% exceeds 5%: spread too wide to trust", markdown)
    assert "status oom: RuntimeError: boom" in markdown
    assert "status oom" in html


def test_results_summary_table_has_a_row_per_record(both):
    records = resnet_records() + gemm_records()
    _, _, markdown = both
    section = markdown.split("## Results", 1)[1].split("## Warnings", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + len(records)  # a table per workload: its header, one row per record
    assert "gemm, 3 result(s); every row: torch, size=4096, batch=1, execution=eager" in section


def test_report_of_a_session_uses_only_that_session(tmp_path):
    records = gemm_records() + [make_record(10.0, workload="gemm", session="other", seed=104)]
    path = store_records(tmp_path / "h.db", records)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["report", "--store", path, "--session", "other", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "from 1 result(s)" in result.output
    assert "Sessions: other." in (out / "report.md").read_text(encoding="utf-8")


def test_missing_store_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["report", "--store", str(tmp_path / "none.db"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_write_report_of_no_records_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        write_report([], tmp_path)


def test_markdown_table_escapes_pipes_and_keeps_every_column():
    text = markdown_table([{"a": "x|y", "b": None}, {"a": "z", "c": 1}])
    lines = text.splitlines()
    assert lines[0] == "| a | b | c |"
    assert lines[2] == "| x\\|y | - | - |"
    assert lines[3] == "| z | - | 1 |"


def test_a_name_with_dollar_signs_is_drawn_as_text_not_parsed_as_mathtext(tmp_path):
    # `cost $\undefinedcmd{x}$` passed validate and then broke the report: matplotlib parsed it as a formula
    name = r"cost $\undefinedcmd{x}$"
    records = [dict(r, scenario=name if i % 2 else "plain") for i, r in enumerate(resnet_records() + gemm_records())]
    out, html, markdown = report(tmp_path, records)
    assert embedded_pngs(html) and all(png.startswith(PNG_MAGIC) for png in embedded_pngs(html))
    assert all(data.startswith(PNG_MAGIC) for data in linked_pngs(out, markdown).values())


def test_a_report_folder_on_a_full_disk_is_one_line_and_leaves_no_empty_png(tmp_path, monkeypatch):
    import errno

    path = store_records(tmp_path / "h.db", gemm_records())
    real = Path.write_bytes

    def full(self, data):
        if self.suffix == ".png":  # the file is made, then the disk has no room for its bytes
            real(self, b"")
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    result = CliRunner().invoke(main, ["report", "--store", path, "--output", str(tmp_path / "out")])
    # before: an OSError traceback and a 0-byte PNG
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert result.output.startswith("error: --output ") and "No space left on device" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert list((tmp_path / "out").iterdir()) == []
