"""`harness report`: a self-contained HTML page and a Markdown file with plots of stored results.

The report answers the question harness exists for first: PyTorch against TensorFlow, like with
like (grouped bars per configuration, one colour per backend variant, the ratio written on each
bar, each framework's fastest configuration named). Then the runs that did not finish, with their
reasons; then each workload's own plots, drawn as the workload declares them (`Workload.plots`,
`x_param`, `metric`, `unit`); technique speedups against `technique_baselines`; device ratios beside
datasheet ratios; every result; every warning. No workload or technique is named in this package:
the workloads say what to draw.

By job: `shaping` turns records into what a plot shows and `rows` into the report's tables and lists;
`bars` and `plots` draw (bar charts; lines against a parameter and the plot kinds a workload may declare)
on `canvas` (matplotlib's Agg canvas; the HTML embeds the plots as base64 PNG data URIs, the Markdown links PNG
files written beside it), `breakdown` the profile's; `sections` puts them in order, `page` renders HTML and
Markdown and `files` writes them.
"""

from harness.present.report.bars import (
    PEAK_COLOUR,
    draw_grouped_bars,
    plot_technique_speedups,
    plot_tflops_vs_peak,
)
from harness.present.report.files import write_report
from harness.present.report.page import (
    CELL_CHARS,
    Plot,
    Section,
    html_table,
    markdown_table,
    render_html,
    render_markdown,
)
from harness.present.report.plots import PLOT_KINDS, plot_memory_vs_x, plot_metric_vs_x
from harness.present.report.rows import (
    device_ratio_rows,
    result_rows,
    unfinished_rows,
    warning_lines,
)
from harness.present.report.sections import (
    build_sections,
    framework_section,
    results_section,
    scaling_section,
    technique_section,
    unfinished_section,
    workload_section,
)
from harness.present.report.shaping import (
    PALETTE,
    Group,
    configuration_groups,
    describe_settings,
    settings,
    variant_colours,
    variant_order,
)

__all__ = [
    "CELL_CHARS", "PALETTE", "PEAK_COLOUR", "PLOT_KINDS", "Group", "Plot", "Section", "build_sections",
    "configuration_groups", "describe_settings", "device_ratio_rows", "draw_grouped_bars", "framework_section",
    "html_table", "markdown_table", "plot_memory_vs_x", "plot_metric_vs_x", "plot_technique_speedups",
    "plot_tflops_vs_peak", "render_html", "render_markdown", "result_rows", "results_section", "scaling_section",
    "settings", "technique_section", "unfinished_rows", "unfinished_section", "variant_colours", "variant_order",
    "warning_lines", "workload_section", "write_report",
]
