"""A report chart of a pair that is not like for like (TensorFlow eager, a debugging mode, against torch
eager) says so on the bar itself, and calls no difference there."""

from __future__ import annotations

import pytest

from harness.present.report.bars import _ratio_label, not_like_for_like
from harness.results.compare import ComparisonRow

DEBUG = ("tensorflow[keras=keras3]: TensorFlow eager runs the training step op by op from Python, a debugging mode "
         "(Keras's fit runs the step as a tf.function)")


def _row(ratio: float, warnings: str) -> ComparisonRow:
    return ComparisonRow.from_dict({"workload": "resnet50_train", "ratio": ratio, "verdict": "slower",
                                    "warnings": warnings, "busy": False})


def _label_texts(row) -> list[str]:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    _ratio_label(ax, 0.0, 1.0, row, {}, True)
    return [t.get_text() for t in ax.texts]


def test_the_bar_of_a_pair_not_like_for_like_carries_the_caveat():
    row = _row(0.54, DEBUG)
    assert not_like_for_like(row)
    (text,) = _label_texts(row)
    assert "0.54" in text and "not like for like" in text


def test_a_like_for_like_pair_has_no_caveat():
    row = _row(0.98, "torch: CV 5.3% exceeds 5%")
    assert not not_like_for_like(row) and not not_like_for_like(None)
    (text,) = _label_texts(row)
    assert "not like for like" not in text
