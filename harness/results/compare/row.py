"""A comparison's row, typed: one compared value against its match group's baseline (`ComparisonRow`).

`pairing` makes them; display, regressions, the report and the results page read their fields. They are dicts
only at the edges: the DataFrame `compare` hands to users and the CSV/JSON a comparison is written as
(`to_dict`, `frame_of`), and a DataFrame or rows given back in (`rows_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from harness.fields import FrozenDict, frozen_mapping
from harness.results.compare.datasheet import DATASHEET_COLUMNS

#: Columns every comparison row has, after the match key's columns.
RESULT_COLUMNS = (
    "compared", "baseline", "value", "metric", "unit", "baseline_median", "value_median", "ratio",
    "ratio_ci_low", "ratio_ci_high", "ci_basis", "change_pct", "p_value", "verdict", "baseline_runs", "value_runs",
    "baseline_samples", "value_samples", "baseline_cv", "value_cv", "higher_is_better", "busy", "warnings",
)
#: Columns of a comparison by a workload's replicas parameter (docs/distributed.md).
SCALING_COLUMNS = ("scaling_efficiency",)
#: Every column that is no match field.
FIGURE_COLUMNS = frozenset(RESULT_COLUMNS) | frozenset(DATASHEET_COLUMNS) | frozenset(SCALING_COLUMNS)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


@dataclass(frozen=True)
class ComparisonRow:
    """One compared value (`value`) against its match group's baseline (`baseline`): the medians over processes,
    their ratio with its 95% CI and p-value, the verdict, how many processes and blocks each side had, and what the
    row warns of. A figure that could not be computed is None."""

    #: what the match group holds fixed: its identifying fields and parameters (`workload`, `device`, `size` ...);
    #: a match field named as a figure (`metric`) is the figure's, as in the DataFrame
    where: FrozenDict
    compared: str
    baseline: str
    value: str
    metric: str | None
    unit: str | None
    baseline_median: float | None
    value_median: float | None
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    #: how the CI was computed: a bootstrap over processes, or over the blocks of one process a side; None: none
    ci_basis: str | None
    change_pct: float | None
    p_value: float | None
    verdict: str
    baseline_runs: int
    value_runs: int
    baseline_samples: int
    value_samples: int
    baseline_cv: float | None
    value_cv: float | None
    higher_is_better: bool
    #: either side's records say their machine was busy
    busy: bool
    warnings: str
    #: a comparison by device: the datasheets' ratio of the two devices, and its working
    by_device: bool = False
    datasheet_ratio: float | None = None
    datasheet: str | None = None
    #: a comparison by the replicas parameter alone: how well the throughput scaled
    by_scaling: bool = False
    scaling_efficiency: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "where", frozen_mapping({k: v for k, v in self.where.items()
                                                          if k not in FIGURE_COLUMNS}))

    def to_dict(self) -> dict[str, Any]:
        """The row as the DataFrame and the exports hold it: the match fields, then RESULT_COLUMNS, then the
        datasheet's columns (by device) and scaling efficiency (by replicas)."""
        row = {k: v for k, v in self.where.items() if k not in FIGURE_COLUMNS}
        row.update((name, getattr(self, name)) for name in RESULT_COLUMNS)
        if self.by_device:
            row.update(datasheet_ratio=self.datasheet_ratio, datasheet=self.datasheet)
        if self.by_scaling:
            row["scaling_efficiency"] = self.scaling_efficiency
        return row

    @classmethod
    def from_dict(cls, row: dict) -> "ComparisonRow":
        """A row from its dict (a DataFrame's record: pandas' NaN, and a column it lacks, as None)."""
        plain = {k: None if _missing(v) else v for k, v in row.items()}
        figures = {name: plain.get(name) for name in RESULT_COLUMNS}
        return cls(where={k: v for k, v in plain.items() if k not in FIGURE_COLUMNS}, **figures,
                   by_device="datasheet_ratio" in plain, datasheet_ratio=plain.get("datasheet_ratio"),
                   datasheet=plain.get("datasheet"), by_scaling="scaling_efficiency" in plain,
                   scaling_efficiency=plain.get("scaling_efficiency"))

    def fixed(self, name: str) -> Any:
        """A match field's value (None where the row's group has none: another workload's parameter)."""
        return self.where.get(name)

    def with_whole_numbers(self) -> "ComparisonRow":
        """The row with every figure that holds a whole number as that integer (as a parameter pandas widened to a
        float is shown)."""
        def whole(value):
            return int(value) if isinstance(value, float) and value.is_integer() else value
        numbers = {f.name: whole(getattr(self, f.name)) for f in fields(self)
                   if isinstance(getattr(self, f.name), float)}
        return replace(self, where={k: whole(v) for k, v in self.where.items()}, **numbers)


def rows_of(table) -> list[ComparisonRow]:
    """Comparison rows from rows, row dicts or a DataFrame `compare` gave."""
    if hasattr(table, "to_dict"):
        table = table.to_dict(orient="records")
    return [r if isinstance(r, ComparisonRow) else ComparisonRow.from_dict(r) for r in table]


def frame_of(rows: list[ComparisonRow]):
    """The rows as a pandas DataFrame: every match field first (a column another workload's rows lack is empty
    there), then the figures' columns in their order."""
    # deferred on purpose: `harness run` imports this package for its tables, and pandas is slow to import
    import pandas as pd

    frame = pd.DataFrame([row.to_dict() for row in rows])
    figures = [c for c in (*RESULT_COLUMNS, *DATASHEET_COLUMNS, *SCALING_COLUMNS) if c in frame.columns]
    return frame[[c for c in frame.columns if c not in FIGURE_COLUMNS] + figures]
