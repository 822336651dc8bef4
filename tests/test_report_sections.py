"""`harness report` answers PyTorch against TensorFlow first, lists runs that did not finish, says
what every plot varies and fixes, and keeps its tables inside the page."""

import re

import pytest

from harness.present import report as rp
from harness.present.report import (
    build_sections,
    html_table,
    markdown_table,
    page,
    write_report,
)
from harness.present.report import canvas as drawing
from harness.present.report.shaping import group_ratios
from harness.results.record import Result
from tests.test_compare import make_record, processes

H200 = "NVIDIA H200"
OOM = "ResourceExhaustedError: OOM when allocating tensor with shape[128,256,56,56]"
NO_CUDA_GRAPH = "execution=cuda_graph: CUDA Graph capture of the whole step is a torch execution mode; TensorFlow has none"


def framework_records(n=5):
    """Both frameworks (TensorFlow under Keras 3 and tf_keras) at two batch sizes, n processes each;
    tf_keras runs out of memory at batch 128, TensorFlow cannot run cuda_graph; a gemm pair with peaks."""
    records, seed = [], 0
    variants = (("torch", {}, 1.0), ("tensorflow", {"keras": "keras3"}, 0.8), ("tensorflow", {"keras": "tf_keras"}, 0.9))
    for batch_size in (32, 128):
        for backend, options, scale in variants:
            seed += 1
            if options.get("keras") == "tf_keras" and batch_size == 128:
                for _ in range(n):
                    record = make_record(backend=backend, batch_size=batch_size, status="oom", device_name=H200)
                    record.update(options=dict(options), error=OOM + "\nTraceback line 2")
                    records.append(record)
                continue
            records += processes(1000.0 * scale * (1 + batch_size / 256), n, seed=seed, options=options,
                                 backend=backend, batch_size=batch_size, device_name=H200)
    unsupported = make_record(backend="tensorflow", execution="cuda_graph", status="unsupported", device_name=H200)
    unsupported.update(options={"keras": "keras3"}, error=NO_CUDA_GRAPH)
    records.append(unsupported)
    for backend, scale in (("torch", 1.0), ("tensorflow", 0.97)):
        for precision, tflops in (("fp32", 51.0), ("bf16", 700.0)):
            seed += 1
            records += processes(tflops * scale, n, seed=seed, workload="gemm", backend=backend,
                                 precision=precision, device_name=H200)
    return [Result.from_dict(r) for r in records]


@pytest.fixture(scope="module")
def sections():
    return build_sections(framework_records())


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("frameworks")
    paths = write_report(framework_records(), out)
    return out, paths["html"].read_text(encoding="utf-8"), paths["markdown"].read_text(encoding="utf-8")


def plots(section):
    return [p for p in section.parts if isinstance(p, rp.Plot)]


def texts(section):
    return [p[1] for p in section.parts if isinstance(p, tuple) and p[0] == "text"]


def lists(section):
    return [line for p in section.parts if isinstance(p, tuple) and p[0] == "list" for line in p[1]]


def tables(section):
    return [p[1] for p in section.parts if isinstance(p, tuple) and p[0] == "table"]


def test_the_framework_comparison_comes_first_with_a_plot_per_workload(sections):
    first = sections[0]
    assert first.title == "PyTorch vs TensorFlow"
    assert [p.slug for p in plots(first)] == ["frameworks_resnet50_train", "frameworks_gemm"]
    assert sections[1].title == "Runs that did not finish"


def test_each_backend_variant_gets_its_own_colour():
    colours = rp.variant_colours(framework_records(n=1))
    # the gemm records run TensorFlow with its default options: a variant of its own
    assert list(colours) == ["torch", "tensorflow", "tensorflow[keras=keras3]", "tensorflow[keras=tf_keras]"]
    assert len(set(colours.values())) == 4


def test_the_ratio_on_each_bar_is_compare_by_backend_against_the_groups_baseline():
    records = [r for r in framework_records() if r.workload == "resnet50_train"]
    assert len(rp.configuration_groups(records)) == 3
    groups = rp.configuration_groups(records, min_variants=2)
    # the cuda_graph configuration: only TensorFlow tried it (unsupported), so it is no group of two,
    # and execution, the same in the groups kept, labels none of them
    assert [g.label for g in groups] == ["batch_size=32", "batch_size=128"]
    ratios, rows = group_ratios(groups, list(rp.variant_colours(records)))
    keras3 = ratios[(0, "tensorflow[keras=keras3]")]
    assert keras3.baseline == "torch" and keras3.ratio == pytest.approx(0.8, abs=0.02)
    assert keras3.verdict == "slower"
    assert (1, "tensorflow[keras=tf_keras]") not in ratios  # it ran out of memory: no bar, no ratio
    assert groups[1].other["tensorflow[keras=tf_keras]"][0].status == "oom"


def test_the_fastest_configuration_of_each_variant_is_named(sections):
    lines = lists(sections[0])
    assert any(line.startswith("fastest torch on resnet50_train: batch_size=128") for line in lines)
    assert any(line.startswith("fastest tensorflow[keras=keras3] on resnet50_train: batch_size=128") for line in lines)
    assert any(line.startswith("tensorflow[keras=tf_keras] on resnet50_train: ")
               and line.endswith("one configuration ran)")
               for line in lines)  # batch 128 ran out of memory
    assert any(line.startswith("fastest tensorflow on gemm: precision=bf16") for line in lines)


def test_the_comparison_table_gives_ratio_and_verdict_per_configuration(sections):
    rows = [row for table in tables(sections[0]) for row in table]
    keras3 = [r for r in rows if r["value"] == "tensorflow[keras=keras3]"]
    assert {r["batch_size"] for r in keras3} == {"32", "128"}
    assert all(r["verdict"] == "slower" and r["processes"] == "5 vs 5" for r in keras3)


def test_every_plot_says_what_varies_and_what_is_fixed_image_size_in_pixels(sections):
    everything = [p for s in sections for p in plots(s)]
    resnet = [p for p in everything if "resnet50_train" in p.slug]
    assert len(resnet) == 3  # the framework bars, throughput and memory against batch size
    for plot in resnet:
        assert "Varies: backend" in plot.caption, plot.slug
        assert "image_size=224 px" in plot.caption, plot.slug
        assert "NVIDIA H200 (cuda:0)" in plot.caption, plot.slug
    throughput = next(p for p in resnet if p.slug == "resnet50_train_throughput_vs_batch_size")
    assert "Varies: backend, batch_size; fixed: NVIDIA H200 (cuda:0), model=resnet50, image_size=224 px" in throughput.caption


def test_one_backend_only_says_there_is_nothing_to_compare_and_names_its_fastest():
    records = [r for r in framework_records(n=1) if r.backend == "torch"]
    first = build_sections(records)[0]
    assert not plots(first)
    assert any("only torch measured here; nothing to compare" in t for t in texts(first))
    assert any(line.startswith("fastest torch on resnet50_train:") for line in lists(first))


def test_a_capacity_answer_of_one_backend_names_its_metric_beside_a_framework_comparison():
    # seen in a GPU session's report: "resnet50_train: only tensorflow measured here" above a table that
    # compared torch with tensorflow; the lone backend was that of the capacity searches
    records = framework_records(n=1)
    search = next(r for r in records if r.backend == "tensorflow" and r.status == "ok")
    search = search.updated(run_id="capacity-1", metric="max_batch_size", unit="images", median=1134.0)
    first = build_sections(records + [search])[0]
    said = [t for t in texts(first) if "measured here" in t]
    assert said and all(t.startswith("resnet50_train (max_batch_size): only tensorflow") for t in said), said


def test_failed_and_unsupported_runs_are_listed_with_their_reasons(sections):
    rows = tables(sections[1])[0]
    oom = next(r for r in rows if r["status"] == "oom")
    assert oom["backend"] == "tensorflow[keras=tf_keras]" and oom["processes"] == "5 of 5"
    assert "batch_size=128" in oom["settings"] and oom["reason"].startswith(OOM)
    unsupported = next(r for r in rows if r["status"] == "unsupported")
    assert unsupported["reason"] == NO_CUDA_GRAPH and "execution=cuda_graph" in unsupported["settings"]
    assert len(rows) == 2  # one row per configuration and reason, not one per process


def test_an_all_ok_store_says_so():
    records = [r for r in framework_records(n=1) if r.status == "ok"]
    assert texts(build_sections(records)[1]) == ["Every run ended ok."]


def test_memory_axis_starts_at_zero_and_peaks_are_drawn_where_known(monkeypatch):
    drawn = {}
    real = drawing.png

    def keep(fig):
        for ax in fig.axes:
            drawn[fig.texts[0].get_text() if fig.texts else ax.get_title()] = ax
        return real(fig)

    monkeypatch.setattr(drawing, "png", keep)
    build_sections(framework_records(n=2))
    memory = next(ax for title, ax in drawn.items() if "peak allocated memory" in title)
    assert memory.get_ylim()[0] == 0
    gemm = next(ax for title, ax in drawn.items() if title.startswith("gemm: achieved TFLOP/s against the datasheet peak"))
    peaks = sorted({round(line.get_ydata()[0], 1) for line in gemm.get_lines() if line.get_color() == rp.PEAK_COLOUR})
    assert peaks == [67.0, 989.5]  # H200 SXM dense fp32 and bf16


def test_no_datasheet_figure_means_no_peak_in_the_title(tmp_path):
    records = processes(0.06, 2, workload="gemm", device="cpu", device_name="AMD EPYC") + processes(
        0.2, 2, seed=1, workload="gemm", backend="tensorflow", device="cpu", device_name="AMD EPYC")
    gemm = next(s for s in build_sections(records) if s.title.startswith("gemm"))
    assert plots(gemm) == []  # the frameworks plot draws these bars already: no second plot of them
    said = " ".join(p for p in gemm.parts if isinstance(p, str))
    assert "No datasheet figure for AMD EPYC fp32" in said and "gemm: backends compared" in said
    torch_only = next(s for s in build_sections(records[:2]) if s.title.startswith("gemm"))
    plot = plots(torch_only)[0]  # one backend: no frameworks plot, so this one draws the bars
    assert plot.title == "gemm: achieved TFLOP/s" and "No datasheet figure for: AMD EPYC fp32" in plot.caption


def test_an_axis_names_its_unit_once():
    from harness.present.report.shaping import axis_label

    assert axis_label("tflops", "TFLOP/s") == "TFLOP/s"
    assert axis_label("throughput", "images/s") == "throughput (images/s)"


def test_html_tables_wrap_and_keep_long_notes_in_a_details_element():
    long = "CV 12.3% exceeds 5%: spread too wide to trust; " * 6
    table = html_table([{"backend": "torch", "notes": long}])
    assert "<details" in table and "</details>" in table
    summary = re.search(r"<summary>(.*?)</summary>", table).group(1)
    assert len(summary) <= rp.CELL_CHARS and summary.endswith("\u2026")
    assert long.strip() in table  # the whole text is in the page
    assert "overflow-wrap: anywhere" in page._CSS


def test_html_page_keeps_every_long_cell_inside_details(written):
    _, html, markdown = written
    for cell in re.findall(r"<td>(.*?)</td>", html):
        if "<details" not in cell:
            assert len(cell) <= rp.CELL_CHARS + 40, cell  # escaped characters may lengthen it a little
    assert "status oom: ResourceExhaustedError" in markdown  # the Warnings section keeps the reasons
    assert markdown.index("## PyTorch vs TensorFlow") < markdown.index("## Runs that did not finish")


def test_markdown_cells_can_be_shortened():
    text = markdown_table([{"a": "x" * 50}], limit=10)
    assert text.splitlines()[2] == "| " + "x" * 9 + "\u2026 |"
