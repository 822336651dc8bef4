"""docs/transformer.md's table of harness against the hand-written loops says only what was measured: each row's
figures are recomputed from the store and the loops' lines it names, so the table cannot drift from them."""

import json
import re
from pathlib import Path

from harness.results.store import open_store

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"
DOC = ROOT / "docs" / "transformer.md"

#: A hand-written loop's row: the framework, then whether it compiled (torch.compile, XLA, jax.jit).
HAND = {"`torch.compile(model)`, AdamW eager (nanoGPT)": ("torch", True), "eager": ("torch", False),
        "`jax.jit` of the step": ("jax", None), "`tf.function(jit_compile=True)`": ("tensorflow", True),
        "`tf.function`": ("tensorflow", False)}
BACKEND = {"torch": "torch", "jax": "jax", "tensorflow (Keras 3)": "tensorflow"}


def rows() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("<!-- hand-vs-harness -->"):text.index("<!-- /hand-vs-harness -->")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[3:] if line.startswith("|")]


def hand_lines() -> list[dict]:
    return [json.loads(line) for line in (DATA / "h100-2026-12-05-transformer-hand.jsonl").read_text().splitlines()]


def hand_rate(framework: str, compiled: bool | None) -> float:
    [line] = [h for h in hand_lines() if framework in h and (compiled is None or h["settings"]["compile"] == compiled)]
    return line["tokens_per_s"]


def harness_rate(backend: str, execution: str) -> float:
    with open_store(DATA / "h100-2026-12-05-transformer.db", readonly=True) as store:
        [record] = [r for r in store.records() if r["status"] == "ok" and r["backend"] == backend
                    and r["params"]["execution"] == execution and r["params"]["attention"] == "fused"
                    and r["options"].get("keras", "keras3") == "keras3"]
    return record["median"]


def _n(x: float) -> str:
    return f"{round(x):,}"


def test_every_row_of_the_hand_written_table_is_recomputed_from_its_files():
    table = rows()
    assert len(table) == 6
    for framework, loop, hand, execution, measured, ratio in table:
        backend = BACKEND[framework]
        h = hand_rate(backend, HAND[loop][1])
        m = harness_rate(backend, execution.split(" ")[0])
        assert (hand, measured, ratio) == (_n(h), _n(m), f"{m / h:.3f}"), (framework, loop, execution)


def test_the_prose_says_within_two_percent_exactly_of_the_pairs_that_are():
    within = {r[0] for r in rows() if abs(float(r[5]) - 1) <= 0.02}
    outside = {r[0] for r in rows() if abs(float(r[5]) - 1) > 0.02}
    assert within == {"jax", "tensorflow (Keras 3)"} and outside == {"torch"}
    text = DOC.read_text(encoding="utf-8")
    assert re.search(r"JAX and both TensorFlow pairs are within 2%\. torch's are not", text)
