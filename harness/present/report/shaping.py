"""Shaping result records for the report's plots: what varies and what is fixed, configuration groups and
their ratios, lines of a plot, estimates over processes, labels. No matplotlib here."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from harness.errors import InputError
from harness.machine.peaks import peak_tflops
from harness.results.compare import (
    EQUIVALENT,
    FIGURE_COLUMNS,
    ComparisonRow,
    backend_variant,
    comparison_rows,
    is_difference,
    match_key,
    process_value,
    technique_baselines,
)
from harness.results.record import Result
from harness.seam.backend import available_backends
from harness.timing import stats
from harness.workloads import WORKLOADS

GiB = 1024**3
#: Colours of backend variants, in the order the variants are first ranked (registry order, then name).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
#: Units of neutral parameters whose workload does not declare one (Field(json_schema_extra={"unit": ...})).
PARAM_UNITS = {"image_size": "px"}


def workload_spec(name):
    """The registered workload of that name (None for one this version does not know)."""
    return WORKLOADS.get(name)


def shown_text(value) -> str:
    """A parameter value as a label shows it: `224`, never `224.0`; a dash for None."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "-" if value is None else str(value)


def param_unit(workload: str | None, param: str) -> str | None:
    """The unit of a neutral parameter: the workload's declaration, else PARAM_UNITS."""
    spec = workload_spec(workload)
    found = spec.params_model.model_fields.get(param) if spec is not None else None
    extra = getattr(found, "json_schema_extra", None)
    if isinstance(extra, dict) and extra.get("unit"):
        return str(extra["unit"])
    return PARAM_UNITS.get(param)


def setting(workload: str | None, param: str, value) -> str:
    """`param=value unit`: one setting as a label shows it."""
    unit = param_unit(workload, param)
    return f"{param}={shown_text(value)}" + (f" {unit}" if unit and value is not None else "")


def device_label(record: Result) -> str:
    """`NVIDIA H200 (cuda:0)`, or the device alone where its name is unknown."""
    name, device = record.device_name, record.device
    return f"{name} ({device})" if name else str(device)


def axis_label(metric: str, unit: str | None) -> str:
    """A value axis's label: the unit alone where the metric's name only spells it (`tflops`, TFLOP/s),
    else `metric (unit)` (`throughput (images/s)`)."""
    def letters(text: str) -> str:
        return "".join(c for c in str(text).lower() if c.isalnum())

    if not unit:
        return str(metric)
    return unit if letters(metric) == letters(unit) else f"{metric} ({unit})"


def variant_of(record: Result) -> str:
    """The record's backend variant (`?` where it names no backend)."""
    return backend_variant(record) or "?"


def varying_settings(records: list[Result], exclude: tuple[str, ...] = ()) -> list[str]:
    """The parameters whose value differs among these records (one that only some have included)."""
    seen: dict[str, set] = {}
    for r in records:
        for k, v in (r.params or {}).items():
            seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    for r in records:  # a parameter only some records have varies too (None against a value)
        for k in seen:
            if k not in (r.params or {}):
                seen[k].add("absent")
    return [k for k, values in seen.items() if len(values) > 1 and k not in exclude]


def fixed_settings(records: list[Result], exclude: tuple[str, ...] = ()) -> dict:
    """The parameters every record shares, with their value (unset ones left out)."""
    varying = set(varying_settings(records))
    out: dict = {}
    for r in records:
        for k, v in (r.params or {}).items():
            if k not in varying and k not in exclude and v is not None:  # an unset one says nothing
                out.setdefault(k, v)
    return out


def settings(records: list[Result], shown: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(what varies, what is fixed) among these records: backend variant, device and every parameter.

    `shown` names parameters a plot puts on an axis: they are listed as varying even at one value.
    """
    workload = next((r.workload for r in records), None)
    variants = sorted({variant_of(r) for r in records})
    devices = sorted({device_label(r) for r in records})
    varies = (["backend"] if len(variants) > 1 else []) + (["device"] if len(devices) > 1 else [])
    varies += [p for p in shown if p not in varies]
    varies += [p for p in varying_settings(records) if p not in varies]
    fixed = (variants if len(variants) == 1 else []) + (devices if len(devices) == 1 else [])
    fixed += [setting(workload, k, v) for k, v in fixed_settings(records, shown).items()]
    return varies, fixed


def describe_settings(records: list[Result], shown: tuple[str, ...] = ()) -> str:
    """What varies among these records and what is fixed, as one line:
    "varies: backend, batch_size; fixed: NVIDIA H200 (cuda:0), ..., image_size=224 px"."""
    varies, fixed = settings(records, shown)
    return f"varies: {', '.join(varies) or 'nothing'}; fixed: {', '.join(fixed) or 'nothing'}"


def sentence(text: str) -> str:
    """The text with its first letter capitalised."""
    return text[:1].upper() + text[1:]


def versions(records: list[Result]) -> str:
    """`torch 2.5.1, tensorflow 2.18.0`: every backend and framework version of these records."""
    found = sorted({f"{r.backend} {r.framework_version}" for r in records if r.framework_version})
    return ", ".join(found)


def variant_order(records: list[Result]) -> list[str]:
    """Every backend variant of the records: in the registry's backend order, then by name."""

    registry = list(available_backends())
    seen = dict.fromkeys(variant_of(r) for r in records)

    def rank(variant: str):
        head = variant.split("[", 1)[0]
        return (registry.index(head) if head in registry else len(registry), variant)

    return sorted(seen, key=rank)


def variant_colours(records: list[Result]) -> dict[str, str]:
    """One colour per backend variant, the same in every plot of a report."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variant_order(records))}


def not_probes(records: list[Result]) -> list[Result]:
    """The records that are no capacity probe (a probe ran one step to see whether a batch fits)."""
    return [r for r in records if not r.probe_of]


def estimate(records: list[Result], value=None) -> tuple[float | None, float | None, float | None, int]:
    """(median over processes, CI low, CI high, processes) of a value per record (default the headline).

    With several processes the CI is the bootstrap over their values; with one, that record's own CI
    over its timed blocks (for the headline only).
    """
    values = [v for v in ((process_value(r) if value is None else value(r)) for r in records) if v is not None]
    if not values:
        return None, None, None, 0
    med = stats.median(values)
    if len(values) >= 2:
        low, high = stats.bootstrap_ci(values)
    elif value is None and records[0].ci_low is not None and records[0].ci_high is not None:
        low, high = records[0].ci_low, records[0].ci_high
    else:
        low = high = None
    return med, low, high, len(values)


@dataclass
class Group:
    """One configuration in a grouped bar chart: its label, ok records and unfinished records per variant."""

    label: str
    ok: dict = field(default_factory=dict)  # variant -> [record]
    other: dict = field(default_factory=dict)  # variant -> [record] (not ok)
    peak: float | None = None
    peak_label: str = ""


def _group_label(records: list[Result], varying: list[str], devices: bool, scenarios: bool) -> str:
    first = records[0]
    parts = []
    if devices:
        parts.append(device_label(first))
    if scenarios:
        parts.append(str(first.scenario))
    parts += [setting(first.workload, p, first.param(p)) for p in varying]
    return "\n".join(parts) or "(one configuration)"


def configuration_groups(records: list[Result], min_variants: int = 1) -> list[Group]:
    """Records (of one workload and metric; every status) grouped by configuration, backend set free;
    only configurations that at least `min_variants` backend variants ran. Each group is labelled
    with the settings that differ among the groups kept.

    Two records share a group when they match as `harness compare --by backend` matches them.
    """
    keyed: dict[tuple, list[Result]] = {}
    for r in not_probes(records):
        keyed.setdefault(match_key(r, ["backend"]), []).append(r)
    kept = [members for members in keyed.values() if len({variant_of(r) for r in members}) >= min_variants]
    records = [r for members in kept for r in members]
    varying = varying_settings(records)
    devices = len({device_label(r) for r in records}) > 1
    scenarios = len({r.scenario for r in records}) > 1
    groups = []
    for members in kept:
        group = Group(_group_label(members, varying, devices, scenarios))
        for r in members:
            (group.ok if r.status == "ok" else group.other).setdefault(variant_of(r), []).append(r)
        groups.append(group)
    return groups


def short_verdict(verdict: str | None) -> str:
    """A verdict in a word for a bar's label: faster/slower/more/less, `same ±2%`, `inconclusive` or `n.s.`."""
    if not verdict:
        return ""
    if is_difference(verdict):
        return verdict.split(":", 1)[0]
    if verdict.startswith(EQUIVALENT):
        return "same \u00b1" + verdict.removeprefix(EQUIVALENT).strip()
    return "inconclusive" if verdict.startswith("inconclusive") else "n.s."


def group_baseline(variants: list[str], group: Group) -> str | None:
    """The group's baseline: the first variant (in report order) with an ok run in it."""
    return next((v for v in variants if v in group.ok), None)


def group_ratios(groups: list[Group], variants: list[str]) -> tuple[dict, list[ComparisonRow]]:
    """({(group index, variant): compare row}, every compare row) against each group's baseline variant."""
    ratios, rows = {}, []
    for gi, group in enumerate(groups):
        if len(group.ok) < 2:
            continue
        base = group_baseline(variants, group)
        try:
            table = comparison_rows([r for rs in group.ok.values() for r in rs], ["backend"], baseline=base)
        except InputError:
            continue
        for row in table:
            ratios[(gi, row.value)] = row
            rows.append(row)
    return ratios, rows


def metric_sets(records: list[Result]) -> list[tuple[str, str, list[Result]]]:
    """(workload, metric, records) for each workload and metric the records hold (every status)."""
    out: dict[tuple, list[Result]] = {}
    for r in records:
        metric = r.metric or getattr(workload_spec(r.workload), "metric", None)
        out.setdefault((r.workload, metric), []).append(r)
    return [(w, m, rs) for (w, m), rs in out.items()]


def line_points(records: list[Result], x_param: str, colours: dict) -> tuple[dict, str]:
    """Records of one workload grouped into lines keyed by x_param: {(variant, rest): {x: [records]}},
    and a note naming the usual value of each other varying setting, which line labels leave out."""
    others = varying_settings(records, (x_param,))
    devices = len({device_label(r) for r in records}) > 1
    usual = {p: Counter(json.dumps(r.param(p), default=str) for r in records).most_common(1)[0][0]
             for p in others}
    lines: dict[tuple, dict] = {}
    workload = next((r.workload for r in records), None)
    for r in records:
        x = r.param(x_param)
        if x is None:
            continue
        rest = ([device_label(r)] if devices else []) + [
            setting(workload, p, r.param(p)) for p in others if json.dumps(r.param(p), default=str) != usual[p]]
        lines.setdefault((variant_of(r), ", ".join(rest)), {}).setdefault(x, []).append(r)
    note = ""
    if others:
        values = [setting(workload, p, json.loads(usual[p])) for p in others]
        note = " Lines not labelled otherwise have " + ", ".join(values) + "."
    order = {v: i for i, v in enumerate(colours)}
    lines = dict(sorted(lines.items(), key=lambda item: (order.get(item[0][0], 99), item[0][1])))
    return lines, note


def device_peak(record: Result, spec) -> tuple[float | None, str]:
    """(dense datasheet peak TFLOP/s of the record's device at the workload's precision, "device precision")."""

    try:
        precision = spec.peak_precision(spec.validate(record.params or {}))
    except Exception:  # parameters of another version: no peak rather than a guess
        return None, f"{device_label(record)}"
    what = f"{record.device_name or record.device} {precision}"
    if not str(record.device or "").startswith("cuda:"):
        return None, what
    return peak_tflops(record.device_name, precision, **record.gpu_size()), what


def row_variant(row: ComparisonRow) -> str:
    """The backend variant of a comparison row (its options are a match field of it, or its JSON)."""
    options = row.fixed("options")
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError:
            options = None
    backend = str(row.fixed("backend"))
    if isinstance(options, dict) and options:
        return f"{backend}[{','.join(f'{k}={v}' for k, v in sorted(options.items()))}]"
    return backend


def present(value) -> bool:
    """Whether a comparison row has a value here (NaN: a column another workload has)."""
    return value is not None and value == value


def speedup_labels(rows: list[ComparisonRow]) -> tuple[list[str], dict[str, list[str]]]:
    """(a label per technique comparison row, {workload: the settings that vary among its rows}): within each
    workload, only the settings that differ between its bars label them."""
    context = list(dict.fromkeys(c for r in rows for c in r.where
                                 if c not in FIGURE_COLUMNS and c not in technique_baselines()))
    varying: dict[str, list[str]] = {}
    for workload in dict.fromkeys(r.fixed("workload") for r in rows):
        group = [r for r in rows if r.fixed("workload") == workload]
        varying[workload] = [c for c in context if c not in ("backend", "workload", "options")
                             and len({shown_text(r.fixed(c)) for r in group if present(r.fixed(c))}) > 1]
    several = len(varying) > 1
    labels = []
    for r in rows:
        workload = r.fixed("workload")
        parts = [f"{r.compared} {r.value} vs {r.baseline}", row_variant(r)]
        parts += [str(workload)] if several else []
        parts += [setting(workload, c, r.fixed(c)) for c in varying[workload] if present(r.fixed(c))]
        labels.append(" | ".join(parts))
    return labels, varying
