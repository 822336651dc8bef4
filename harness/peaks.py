"""Datasheet figures by GPU name: dense peak TFLOP/s per precision, memory and bandwidth.

Only figures from vendor datasheets quoted in the project's reference are written here; a
precision or device without one gives None (so pct_of_peak is null, never a guess).
"""

from __future__ import annotations

# Matching is by substring of the device name, most specific first.
DATASHEETS: list[tuple[str, dict]] = [
    ("H200", {"fp32": 67.0, "tf32": 494.0, "bf16": 989.0, "fp16": 989.0, "memory_gb": 141, "bandwidth_gbs": 4800}),
    ("H100", {"fp32": 67.0, "tf32": 494.0, "bf16": 989.0, "fp16": 989.0, "memory_gb": 80, "bandwidth_gbs": 3350}),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    ("RTX A6000", {"fp32": 38.7, "memory_gb": 48, "bandwidth_gbs": 768, "cuda_cores": 10752}),
    ("RTX 4090", {"fp32": 82.6, "memory_gb": 24, "bandwidth_gbs": 1008, "cuda_cores": 16384}),
]


def datasheet(device_name: str | None) -> dict | None:
    """The datasheet entry whose key occurs in the device name, or None."""
    if not device_name:
        return None
    for key, sheet in DATASHEETS:
        if key.lower() in device_name.lower():
            return {"model": key, **sheet}
    return None


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """Dense datasheet peak TFLOP/s of the device for a precision (fp32, tf32, fp16, bf16), or None."""
    sheet = datasheet(device_name)
    return sheet.get(precision) if sheet else None


def pct_of_peak(tflops: float | None, device_name: str | None, precision: str) -> float | None:
    """Achieved TFLOP/s as percent of the datasheet peak, or None where either is unknown."""
    peak = peak_tflops(device_name, precision)
    if tflops is None or not peak:
        return None
    return 100.0 * tflops / peak
