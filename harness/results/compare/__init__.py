"""Comparison of stored results: is A faster than B, by how much, and how sure are we.

Pure functions over result records (`Result` objects; record rows and the DataFrame
`harness.load_results` gives are accepted and typed at the door). Records are matched on every
identifying field except the ones compared (a backend's non-default options included), so only the
compared field differs.

Each record is one worker process, and a process is the unit of the comparison: it gives one
sample, its median over its timed blocks. Blocks inside one process share its allocator state,
clocks, autotuning and placement, so they say how steady that process was and nothing about the
next one; pooling them as independent samples made two runs of one configuration "differ" at
p = 0.008. The ratio's CI is a bootstrap over processes, the test a Mann-Whitney U over process
medians, and a verdict needs enough processes per side, p < alpha, a CI that excludes 1 and a
change of at least the minimum effect (README, "Statistics").

By job: `records` reads a record (its configuration key, backend variant, per-process value),
`verdicts` judges a row, `datasheet` gives the device ratio the datasheets expect, `pairing` builds
the rows (`row.ComparisonRow`, typed; a DataFrame only for users) against the `baseline` with their
`caveats`, `display` formats them; `fastest`, `techniques` and `regressions` answer from them.
"""

from harness.results.compare.baseline import label, resolve_baseline, session_baseline
from harness.results.compare.caveats import CONTEXT_FIELDS, alike, busy_records
from harness.results.compare.datasheet import (
    DATASHEET_COLUMNS,
    datasheet_ratio,
    peak_precision,
)
from harness.results.compare.display import (
    BUSY_NOTE,
    describe_common,
    display_rows,
    fmt,
    table_notes,
)
from harness.results.compare.fastest import describe_fastest, fastest_configurations
from harness.results.compare.pairing import (
    CI_PROCESSES,
    CI_WITHIN,
    compare,
    comparison_rows,
    scaling_efficiency_of,
)
from harness.results.compare.records import (
    BY_FIELDS,
    KEY_FIELDS,
    LINKED,
    as_records,
    as_results,
    backend_options,
    backend_variant,
    canonical_backend,
    field_value,
    known_fields,
    load_records,
    match_key,
    ok_records,
    option_defaults,
    parse_by,
    process_value,
    record_params,
    resolve_latest,
    sample_values,
)
from harness.results.compare.regressions import fail_if_slower, slowdown_pct
from harness.results.compare.row import (
    FIGURE_COLUMNS,
    RESULT_COLUMNS,
    SCALING_COLUMNS,
    ComparisonRow,
    frame_of,
    rows_of,
)
from harness.results.compare.techniques import technique_baselines, technique_speedups
from harness.results.compare.verdicts import (
    ALPHA,
    EQUIVALENT,
    FASTER,
    INCONCLUSIVE,
    METRICS,
    MIN_EFFECT_PCT,
    SAME,
    SLOWER,
    UNTESTED,
    equivalent,
    inconclusive_reason,
    is_difference,
)

#: The names these had when they were private to one module (kept importable for callers of those).
_alike, _match_key = alike, match_key

__all__ = [
    "resolve_latest",
    "ALPHA", "BUSY_NOTE", "BY_FIELDS", "CI_PROCESSES", "CI_WITHIN", "CONTEXT_FIELDS", "DATASHEET_COLUMNS", "EQUIVALENT", "FASTER",
    "FIGURE_COLUMNS", "INCONCLUSIVE", "KEY_FIELDS", "LINKED", "METRICS", "MIN_EFFECT_PCT", "RESULT_COLUMNS", "SAME",
    "SCALING_COLUMNS", "SLOWER", "UNTESTED", "ComparisonRow", "alike", "as_records", "as_results", "backend_options",
    "backend_variant", "busy_records", "canonical_backend", "compare", "comparison_rows", "datasheet_ratio",
    "describe_common", "frame_of", "rows_of",
    "describe_fastest", "display_rows", "equivalent", "fail_if_slower", "fastest_configurations", "field_value", "fmt",
    "inconclusive_reason", "is_difference", "known_fields", "label", "load_records", "match_key", "ok_records",
    "option_defaults", "parse_by", "peak_precision", "process_value",
    "record_params", "resolve_baseline", "sample_values", "scaling_efficiency_of", "session_baseline",
    "slowdown_pct", "table_notes", "technique_baselines", "technique_speedups",
]
