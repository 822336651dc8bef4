"""Datasheet peaks: every entry found by its real NVML name, variants told apart, unknown devices named.

Fast and framework-free: plain dicts for records, no backend imported.
"""

import pytest

from harness.machine import peaks
from harness.machine.peaks import (
    DATASHEETS,
    PRECISIONS,
    datasheet,
    pct_of_peak,
    peak_tflops,
    unknown_device_warning,
)

GIB = 2**30
MIB = 2**20

#: Real device names as NVML / torch.cuda.get_device_name spell them -> the entry each must match.
NVML_NAMES = {
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA L40S": "L40S",
    "NVIDIA L4": "L4",
    "NVIDIA GeForce RTX 3090": "RTX 3090",
    "NVIDIA GeForce RTX 4080": "RTX 4080",
    "NVIDIA GeForce RTX 4090": "RTX 4090",
    "NVIDIA GeForce RTX 5090": "RTX 5090",
    "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada",
    "NVIDIA RTX A6000": "RTX A6000",
    "NVIDIA A10": "A10",
}

#: What NVML reports as total memory on these boards (MiB): HBM ~0.996 of nominal, GDDR with ECC 15/16.
NVML_MEMORY_MIB = {
    "NVIDIA H200": 143771, "NVIDIA H200 NVL": 143771, "NVIDIA H100 80GB HBM3": 81559, "NVIDIA H100 PCIe": 81559,
    "NVIDIA H100 NVL": 95830, "NVIDIA A100-SXM4-40GB": 40960, "NVIDIA A100-SXM4-80GB": 81920,
    "NVIDIA A100-PCIE-40GB": 40960, "NVIDIA A100 80GB PCIe": 81920, "NVIDIA L40S": 46068, "NVIDIA L4": 23034,
    "NVIDIA GeForce RTX 3090": 24576, "NVIDIA GeForce RTX 4080": 16376, "NVIDIA GeForce RTX 4090": 24564,
    "NVIDIA GeForce RTX 5090": 32607, "NVIDIA RTX 6000 Ada Generation": 49140, "NVIDIA RTX A6000": 46068,
    "NVIDIA A10": 23028,
}


# --------------------------------------------------------------------------- every entry, by name
@pytest.mark.parametrize("name, model", sorted(NVML_NAMES.items()))
def test_every_entry_is_found_by_its_nvml_name(name, model):
    sheet = datasheet(name)
    assert sheet is not None and sheet["model"] == model
    assert unknown_device_warning(name) is None


@pytest.mark.parametrize("name, model", sorted(NVML_NAMES.items()))
def test_the_board_s_own_nvml_memory_and_sm_count_keep_the_match(name, model):
    sm = next(s.sm_count for s in DATASHEETS if s.model == model)
    sheet = datasheet(name, memory_bytes=NVML_MEMORY_MIB[name] * MIB, sm_count=sm)
    assert sheet is not None and sheet["model"] == model


def test_the_name_table_covers_every_entry():
    assert {s.model for s in DATASHEETS} == set(NVML_NAMES.values())


def test_each_entry_names_its_source_and_keeps_the_return_shape():
    for sheet in DATASHEETS:
        d = sheet.as_dict()
        assert d["source"] and "NVIDIA" in d["source"], sheet.model
        assert set(PRECISIONS) | {"model", "memory_gb", "bandwidth_gbs", "source"} <= set(d)
        assert d["memory_gb"] > 0 and d["bandwidth_gbs"] > 0
        for p in PRECISIONS:
            assert d[p] is None or d[p] > 0
        # dense tensor TF32 is never above dense BF16 on any of these parts
        if d["tf32"] and d["bf16"]:
            assert d["tf32"] <= d["bf16"]


@pytest.mark.parametrize("name, precision, dense", [
    # sheets printing sparse tensor figures are halved: 1,979* -> 989.5, 1,513* -> 756.5, 1,671* -> 835.5, 242* -> 121
    ("NVIDIA H200", "bf16", 989.5), ("NVIDIA H100 80GB HBM3", "tf32", 494.5), ("NVIDIA H100 PCIe", "fp16", 756.5),
    ("NVIDIA H100 NVL", "bf16", 835.5), ("NVIDIA H200 NVL", "bf16", 835.5), ("NVIDIA L4", "fp16", 121.0),
    # sheets printing dense first are kept as printed
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0), ("NVIDIA L40S", "tf32", 183.0), ("NVIDIA A10", "bf16", 125.0),
    # GeForce: FP16 with FP32 accumulate (half the FP16-accumulate figure), not 330.3 / 142 / 419
    ("NVIDIA GeForce RTX 4090", "fp16", 165.2), ("NVIDIA GeForce RTX 3090", "fp16", 71.2),
    ("NVIDIA GeForce RTX 5090", "bf16", 209.5),
    # professional GA102: FP32 accumulate not halved
    ("NVIDIA RTX A6000", "fp16", 154.8), ("NVIDIA RTX A6000", "tf32", 77.4),
    ("NVIDIA RTX A6000", "fp32", 38.7), ("NVIDIA GeForce RTX 4090", "fp32", 82.6),
])
def test_dense_figures(name, precision, dense):
    assert peak_tflops(name, precision) == pytest.approx(dense)


def test_unconfirmed_figures_are_none_and_named_in_a_warning():
    assert peak_tflops("NVIDIA GeForce RTX 4080", "bf16") is None
    assert peak_tflops("NVIDIA GeForce RTX 4080", "fp32") == pytest.approx(48.7)
    assert pct_of_peak(50.0, "NVIDIA GeForce RTX 4080", "bf16") is None
    warning = unknown_device_warning("NVIDIA GeForce RTX 4080", precision="bf16")
    assert "RTX 4080" in warning and "bf16" in warning and "null" in warning
    assert unknown_device_warning("NVIDIA GeForce RTX 4080", precision="fp32") is None
    assert peak_tflops("NVIDIA RTX 6000 Ada Generation", "tf32") is None


# --------------------------------------------------------------------------- variants told apart
@pytest.mark.parametrize("name, wrong", [
    ("NVIDIA H100 PCIe", "H100 SXM"), ("NVIDIA H100 NVL", "H100 SXM"), ("NVIDIA H200 NVL", "H200 SXM"),
    ("NVIDIA H200", "H200 NVL"), ("NVIDIA RTX A6000", "RTX 6000 Ada"), ("NVIDIA RTX 6000 Ada Generation", "RTX A6000"),
    ("NVIDIA A10", "A100 SXM4 40GB"), ("NVIDIA L4", "L40S"), ("NVIDIA L40S", "L4"),
])
def test_a_variant_never_takes_another_s_entry(name, wrong):
    assert datasheet(name)["model"] != wrong


@pytest.mark.parametrize("name", [
    "NVIDIA A10G", "NVIDIA L40", "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 Laptop GPU",
    "NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 4080 SUPER", "NVIDIA GeForce RTX 5090 D",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GH200 480GB", "NVIDIA RTX 6000",
    "NVIDIA H100 SXM5 94GB", "NVIDIA A100", "NVIDIA H100",
])
def test_near_names_without_an_entry_match_nothing(name):
    assert datasheet(name) is None
    assert name in unknown_device_warning(name)


@pytest.mark.parametrize("memory_mib, sm_count, model", [
    (81559, 132, "H100 SXM"),
    (81559, 114, "H100 PCIe"),
    (95830, None, "H100 NVL"),
    (95830, 132, "H100 NVL"),
    (None, 114, "H100 PCIe"),
])
def test_plain_h100_is_resolved_by_nvml_memory_and_sm_count(memory_mib, sm_count, model):
    memory = memory_mib * MIB if memory_mib else None
    assert datasheet("NVIDIA H100", memory_bytes=memory, sm_count=sm_count)["model"] == model
    assert unknown_device_warning("NVIDIA H100", memory_bytes=memory, sm_count=sm_count) is None
    assert peak_tflops("NVIDIA H100", "bf16", memory_bytes=memory, sm_count=sm_count) == \
        datasheet("NVIDIA H100", memory_bytes=memory, sm_count=sm_count)["bf16"]


def test_plain_h100_stays_null_when_memory_alone_cannot_tell_sxm_from_pcie():
    assert datasheet("NVIDIA H100", memory_bytes=81559 * MIB) is None
    warning = unknown_device_warning("NVIDIA H100", memory_bytes=81559 * MIB)
    assert "H100 SXM" in warning and "H100 PCIe" in warning and "H100 NVL" not in warning
    assert "null" in warning
    assert pct_of_peak(700.0, "NVIDIA H100", "bf16", memory_bytes=81559 * MIB) is None


def test_plain_a100_is_resolved_by_memory_only_where_the_boards_share_every_figure():
    # 40GB: SXM4 and PCIe have the same peaks and the same 1,555 GB/s, so the answer needs no guess
    sheet = datasheet("NVIDIA A100", memory_bytes=40960 * MIB)
    assert sheet["bf16"] == 312.0 and sheet["bandwidth_gbs"] == 1555
    assert "A100 SXM4 40GB" in sheet["model"] and "A100 PCIe 40GB" in sheet["model"]
    # 80GB: 2,039 GB/s on SXM4 against 1,935 on PCIe, and SM count is 108 on both: unresolved
    assert datasheet("NVIDIA A100", memory_bytes=81920 * MIB, sm_count=108) is None
    assert "do not tell them apart" in unknown_device_warning("NVIDIA A100", memory_bytes=81920 * MIB)
    # a name that says the form factor needs only the memory size
    assert datasheet("NVIDIA A100-SXM4", memory_bytes=81920 * MIB)["model"] == "A100 SXM4 80GB"
    assert datasheet("NVIDIA A100-SXM4", memory_bytes=40960 * MIB)["model"] == "A100 SXM4 40GB"


@pytest.mark.parametrize("name, memory_mib, sm_count", [
    ("NVIDIA H100 PCIe", 81559, 132),          # a PCIe board has 114 SMs
    ("NVIDIA H100 80GB HBM3", 95830, None),    # 94 GB is not the SXM's 80 GB
    ("NVIDIA A100-SXM4-40GB", 81920, None),
    ("NVIDIA GeForce RTX 4090", 24564, 114),   # a 4090 D, say, reporting the plain name
])
def test_nvml_figures_that_contradict_the_name_give_none_and_say_so(name, memory_mib, sm_count):
    assert datasheet(name, memory_bytes=memory_mib * MIB, sm_count=sm_count) is None
    warning = unknown_device_warning(name, memory_bytes=memory_mib * MIB, sm_count=sm_count)
    assert name in warning and "fits no datasheet entry" in warning


def test_a_mig_slice_has_no_peak_of_its_own():
    name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    assert datasheet(name) is None
    assert "MIG" in unknown_device_warning(name)


def test_unknown_device_gives_none_and_a_warning_naming_it():
    name = "NVIDIA Quadro Imaginary 9000"
    assert datasheet(name) is None and peak_tflops(name, "fp32") is None and pct_of_peak(10.0, name, "fp32") is None
    assert unknown_device_warning(name) == (
        "no datasheet entry for 'NVIDIA Quadro Imaginary 9000': pct_of_peak and datasheet ratios are null")
    assert datasheet(None) is None and datasheet("") is None
    assert unknown_device_warning(None) is None and unknown_device_warning("  ") is None


def test_the_old_positional_signatures_still_work():
    assert datasheet("NVIDIA H200")["bf16"] == 989.5
    assert peak_tflops("NVIDIA H200", "bf16") == 989.5
    assert pct_of_peak(751.35, "NVIDIA H200", "bf16") == pytest.approx(100 * 751.35 / 989.5)
    assert pct_of_peak(None, "NVIDIA H200", "bf16") is None
    assert peaks.datasheet("nvidia  h100  pcie")["model"] == "H100 PCIe"  # case and spacing do not matter


def test_datasheet_returns_a_copy():
    datasheet("NVIDIA GeForce RTX 4090")["fp32"] = 0
    assert datasheet("NVIDIA GeForce RTX 4090")["fp32"] == 82.6


# --------------------------------------------------------------------------- through harness.results.compare
def _gemm_record(median: float, device: str, device_name: str, precision: str, seed: int) -> dict:
    """An ok gemm record, enough of one for harness.results.compare: samples spread 0.2% around `median`."""
    samples = [median * (1 + 0.002 * ((seed * 7 + i * 13) % 11 - 5) / 5) for i in range(12)]
    return {
        "schema_version": 1, "run_id": f"r{seed}", "session_id": "s1", "run_key": f"gemm-{device}",
        "scenario": "gemm-test", "workload": "gemm", "backend": "torch", "framework_version": "2.4.0",
        "device": device, "device_requested": device, "device_name": device_name,
        "params": {"size": 4096, "m": None, "n": None, "k": None, "batch": 1, "precision": precision,
                   "execution": "eager"},
        "api": {}, "status": "ok", "error": None, "metric": "tflops", "unit": "TFLOP/s",
        "samples": samples, "median": median, "tflops": median, "warnings": [], "checks": {}, "timing": {},
        "telemetry": {}, "env": {}, "started_at": f"2025-01-01T00:00:{seed:02d}",
    }


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_compare_by_device_shows_the_a6000_4090_datasheet_ratio(precision):
    from harness.results.compare import compare

    a6000, rtx4090 = "NVIDIA RTX A6000", "NVIDIA GeForce RTX 4090"
    records = [
        _gemm_record(0.8 * peak_tflops(a6000, precision), "cuda:0", a6000, precision, seed=1),
        _gemm_record(0.8 * peak_tflops(rtx4090, precision), "cuda:1", rtx4090, precision, seed=2),
    ]
    row = compare(records, by=["device"], baseline="cuda:0").iloc[0]
    expected = peak_tflops(rtx4090, precision) / peak_tflops(a6000, precision)
    assert row["datasheet_ratio"] == pytest.approx(expected)
    assert row["datasheet_ratio"] == pytest.approx({"fp32": 82.6 / 38.7, "tf32": 82.6 / 77.4,
                                                    "bf16": 165.2 / 154.8}[precision])
    assert f"RTX 4090 / RTX A6000 {precision}" in row["datasheet"]


def test_compare_tells_an_ambiguous_device_name_apart_by_what_its_records_hold():
    from harness.results.compare import datasheet_ratio
    from harness.results.record import Result

    record = Result(device="cuda:1", env={"variables": {"CUDA_VISIBLE_DEVICES": "3,2"},
                                          "gpus": [{"index": 2, "memory_total_bytes": 80 * 2**30}],
                                          "framework": {"gpu_multiprocessors": 132}})
    assert record.gpu_size() == {"memory_bytes": 80 * 2**30, "sm_count": 132}  # cuda:1 is NVML's GPU 2
    plain = datasheet_ratio("NVIDIA H100 80GB HBM3", "NVIDIA H100", "bf16")
    sized = datasheet_ratio("NVIDIA H100 80GB HBM3", "NVIDIA H100", "bf16", None, record.gpu_size())
    assert plain == (None, None)  # "NVIDIA H100" alone could be SXM, PCIe or NVL
    assert sized[0] == pytest.approx(1.0) and "H100 SXM" in sized[1]
