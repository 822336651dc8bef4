"""`harness compare --breakdown` and the report's breakdown section, on stored records carrying a profile."""

from __future__ import annotations

import json

import pytest

from harness.errors import InputError
from harness.present.breakdown import breakdown_text
from harness.present.report import build_sections
from harness.present.report.page import Plot
from harness.results.compare.breakdown import breakdown_pairs
from harness.results.record import Result
from harness.timing.profile import CLASSES
from tests.test_compare import invoke, make_record, store_records


def profile(**ms) -> dict:
    """A breakdown with these milliseconds per step (`idle` among them), the rest zero."""
    idle = ms.pop("idle", 0.0)
    classes = {c: ms.get(c, 0.0) / 1e3 for c in CLASSES}
    return {"activity": "gpu", "classes_s": classes, "idle_s": idle / 1e3, "step_s": (sum(ms.values()) + idle) / 1e3}


TORCH = dict(conv=30.0, norm=6.0, elementwise=8.0, reduce=1.0, idle=2.0)
KERAS3 = dict(conv=31.0, norm=0.0, elementwise=40.0, reduce=20.0, layout=3.0, idle=6.0)


def records(keras3=KERAS3, torch=TORCH, n=2):
    out = []
    for i in range(n):
        t = make_record(5000.0, backend="torch", seed=i, execution="eager", batch_size=256)
        t["profile"] = profile(**torch)
        k = make_record(900.0, backend="tensorflow", seed=10 + i, execution="graph", batch_size=256)
        k["options"], k["profile"] = {"keras": "keras3"}, profile(**keras3)
        out += [t, k]
    return out


def test_pairs_put_each_side_beside_its_baseline_with_the_difference():
    (pair,) = breakdown_pairs([Result.from_dict(r) for r in records()], ["backend", "execution"])
    assert pair.baseline.label == "torch / eager" and pair.value.label.startswith("tensorflow")
    assert pair.diff_ms("elementwise") == pytest.approx(32.0) and pair.diff_ms("norm") == pytest.approx(-6.0)
    assert pair.value.processes == 2 and pair.value.step_ms == pytest.approx(100.0)
    sentence = pair.sentence()
    assert sentence.startswith(f"{pair.value.label} vs torch / eager: +53.00 ms a step (+32.00 ms elementwise, "
                               "+19.00 ms reduce")


def test_a_class_no_stored_profile_knew_is_left_out_not_shown_as_zero():
    stored = records()
    for r in stored:  # profiles stored before the attention class existed
        del r["profile"]["classes_s"]["attention"]
    (pair,) = breakdown_pairs([Result.from_dict(r) for r in stored], ["backend", "execution"])
    assert "attention" not in pair.parts and {"conv", "norm", "idle"} <= set(pair.parts)
    assert "attention" not in breakdown_text([pair], width=100)
    (fresh,) = breakdown_pairs([Result.from_dict(r) for r in records()], ["backend", "execution"])
    assert "attention" in fresh.parts


def test_records_without_a_breakdown_are_refused_with_the_way_to_get_one():
    plain = [Result.from_dict({**r, "profile": {}}) for r in records()]
    with pytest.raises(InputError, match="--profile"):
        breakdown_pairs(plain, ["backend", "execution"])
    failed = [Result.from_dict({**r, "profile": {"error": "no CUPTI"}}) for r in records()]
    with pytest.raises(InputError, match="no ok result carries a profile breakdown"):
        breakdown_pairs(failed, ["backend"])


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_table_fits_the_width(width):
    pairs = breakdown_pairs([Result.from_dict(r) for r in records()], ["backend", "execution"])
    text = breakdown_text(pairs, width=width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert any(line.startswith("elementwise") and "+32.00" in line and "#" in line for line in lines)
    assert ("side %" in text) == (width >= 100)  # the shares only where there is room


def test_compare_breakdown_from_the_command_line(tmp_path):
    path = store_records(tmp_path / "r.db", records())
    result = invoke("compare", "--store", path, "--by", "backend,execution", "--breakdown")
    assert result.exit_code == 0, result.output
    assert "vs torch / eager: +53.00 ms a step" in result.output
    data = json.loads(invoke("compare", "--store", path, "--by", "backend,execution", "--breakdown",
                             "--format", "json").output)
    assert data[0]["diff_ms"]["reduce"] == pytest.approx(19.0)
    bad = invoke("compare", "--store", path, "--by", "backend,execution", "--breakdown", "--format", "csv")
    assert bad.exit_code == 2 and "expected table or json" in bad.output


def test_the_report_has_a_breakdown_section_only_where_runs_were_profiled():
    sections = build_sections([Result.from_dict(r) for r in records()])
    (section,) = [s for s in sections if s.title.startswith("Where the step goes")]
    plots = [p for p in section.parts if isinstance(p, Plot)]
    assert len(plots) == 1 and plots[0].png.startswith(b"\x89PNG")
    tables = [p[1] for p in section.parts if isinstance(p, tuple) and p[0] == "table"]
    assert tables[0][0]["elementwise"] == "+32.00"
    unprofiled = build_sections([Result.from_dict({**r, "profile": {}}) for r in records()])
    assert not any(s.title.startswith("Where the step goes") for s in unprofiled)


def test_the_report_draws_each_workloads_breakdown_on_its_own_scale():
    # the H200's breakdown store: ResNet-50 steps of tens of ms and a GEMM step of a fraction of one
    from pathlib import Path

    from harness.results.manifest import load_records

    path = Path(__file__).resolve().parents[1] / "docs" / "data" / "h200-2026-12-01-breakdown.db"
    sections = build_sections(load_records(str(path)))
    (section,) = [s for s in sections if s.title.startswith("Where the step goes")]
    slugs = sorted(p.slug for p in section.parts if isinstance(p, Plot))
    assert slugs == ["profile_breakdown_gemm", "profile_breakdown_resnet50_train"]
