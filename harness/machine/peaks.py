"""Datasheet figures by GPU: dense peak TFLOP/s per precision, memory and bandwidth.

Every figure is the vendor's own (a datasheet or an architecture whitepaper), named beside it.
A figure that could not be confirmed is None, so `pct_of_peak` and the datasheet ratio are null,
never a guess. The table, its sources and the matching rules are described in docs/peaks.md.

Precisions (the keys of a sheet):

- ``fp32``: non-tensor FP32 (CUDA cores); what a GEMM with TF32 off can reach.
- ``tf32``: TF32 on the tensor cores.
- ``bf16`` / ``fp16``: tensor cores with **FP32 accumulate**, the mode cuBLAS and XLA use for a
  16-bit matmul. Where a sheet prints FP16 with FP16 accumulate separately, that figure is not kept:
  on GeForce cards (RTX 3090, 4090, 5090) it is twice the FP32-accumulate figure, and frameworks do
  not multiply that way.

All figures are dense. A data-centre sheet prints the tensor rows "with sparsity" (2:4 structured
sparsity doubles them); those are halved here, and only those whose sheet says so.

Matching: a device name (as NVML and ``torch.cuda.get_device_name`` spell it, e.g.
"NVIDIA H100 80GB HBM3") must match one entry's name pattern in full, so "NVIDIA H100 PCIe" never
matches the SXM entry, "NVIDIA A10" never matches an A100, and "NVIDIA GeForce RTX 4090 D" or
"... Laptop GPU" match nothing. A name that only says the family ("NVIDIA H100", "NVIDIA A100")
is resolved by the device's memory size and SM count when the caller has them; otherwise, and for a
device with no entry or a MIG slice, the answer is None and `unknown_device_warning` says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The precision keys of a sheet.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

# --------------------------------------------------------------------------- sources (titles)
H100_DS = ("NVIDIA H100 Tensor Core GPU datasheet (H100 SXM / H100 NVL / H100 PCIe columns; tensor rows "
           "'* Shown with sparsity. Specifications 1/2 lower without sparsity', halved here)")
H100_NVL_PB = "NVIDIA H100 NVL GPU product brief (94 GB HBM3, 3,938 GB/s, 132 SMs at 1,785 MHz)"
HOPPER_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (SM counts: SXM5 132, PCIe 114)"
H200_DS = ("NVIDIA H200 Tensor Core GPU datasheet / nvidia.com H200 specifications (H200 SXM and H200 NVL "
           "columns; tensor rows '* With sparsity', halved here)")
A100_DS = ("NVIDIA A100 Tensor Core GPU datasheet (dense figures printed, '* With sparsity' beside them; "
           "bandwidth per form factor and memory size)")
AMPERE_WP = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 6,912 FP32 cores)"
L40S_DS = "NVIDIA L40S GPU datasheet (tensor rows 'dense | sparse*')"
L4_DS = ("NVIDIA L4 Tensor Core GPU datasheet (tensor rows '* Shown with sparsity. Specifications are "
         "one-half lower without sparsity', halved here)")
A10_DS = "NVIDIA A10 Tensor Core GPU datasheet (tensor rows 'dense | sparse*')"
GA102_WP = ("NVIDIA Ampere GA102 GPU Architecture whitepaper v2 (Appendix A: GeForce RTX 3090; "
            "Table 3 / Appendix C: RTX A6000)")
ADA_WP = "NVIDIA Ada GPU Architecture whitepaper v2.x (Appendix A: GeForce RTX 4090, GeForce RTX 4080)"
RTX_BLACKWELL_WP = "NVIDIA RTX Blackwell GPU Architecture whitepaper v1.0 (Table 3: GeForce RTX 3090 / 4090 / 5090)"
RTX6000ADA_DS = "NVIDIA RTX 6000 Ada Generation datasheet"
RTX_PRO_BLACKWELL_WP = "NVIDIA RTX Blackwell PRO GPU Architecture whitepaper v1.0 (Table 4: RTX 6000 Ada column)"


@dataclass(frozen=True)
class Sheet:
    """One datasheet entry. `names` are regular expressions matched in full (case-insensitive)
    against the device name with a leading "NVIDIA " removed; the model name itself always matches."""

    model: str
    names: tuple[str, ...]
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    memory_gb: float
    bandwidth_gbs: float
    source: str
    sm_count: int | None = None
    cuda_cores: int | None = None

    def as_dict(self) -> dict:
        """The entry as shown and exported: its figures, the sizes that identify it, its source."""
        out = {"model": self.model, **{p: getattr(self, p) for p in PRECISIONS},
               "memory_gb": self.memory_gb, "bandwidth_gbs": self.bandwidth_gbs}
        if self.cuda_cores is not None:
            out["cuda_cores"] = self.cuda_cores
        if self.sm_count is not None:
            out["sm_count"] = self.sm_count
        out["source"] = self.source
        return out

    def figures(self) -> tuple:
        """What a peak or ratio is computed from: two entries with equal figures are interchangeable."""
        return tuple(getattr(self, p) for p in PRECISIONS) + (self.memory_gb, self.bandwidth_gbs)

    def describe(self) -> str:
        """`NVIDIA H200 (141 GB, 132 SMs)`: the entry as a warning names it."""
        sm = f", {self.sm_count} SMs" if self.sm_count else ""
        return f"{self.model} ({self.memory_gb:g} GB{sm})"


# --------------------------------------------------------------------------- the table
DATASHEETS: tuple[Sheet, ...] = (
    # --- Hopper ---------------------------------------------------------------------------------
    # H200 SXM: FP32 67; TF32 989*; BF16 1,979*; FP16 1,979* (* with sparsity) -> 494.5 / 989.5 dense.
    # 141 GB HBM3e, 4.8 TB/s. SM count 132: NVML on this project's H200 (docs/benchmarks.md: 141 GB,
    # 132 SMs, max SM clock 1980 MHz), the H100 SXM5 configuration of the Hopper whitepaper.
    # "NVIDIA H200" is the SXM board's NVML name; the NVL board reports "NVIDIA H200 NVL".
    Sheet("H200 SXM", (r"H200(?: 141 ?GB)?(?: HBM3e?)?", r"H200[ -]SXM5?(?:[ -]141 ?GB)?(?: HBM3e?)?"),
          fp32=67.0, tf32=494.5, bf16=989.5, fp16=989.5, memory_gb=141, bandwidth_gbs=4800,
          source=H200_DS + "; " + HOPPER_WP, sm_count=132, cuda_cores=16896),
    # H200 NVL: FP32 60; TF32 835*; BF16 1,671*; FP16 1,671* -> 417.5 / 835.5 dense. 141 GB, 4.8 TB/s.
    # Same memory as the SXM board, and its SM count is not on the sheet: left None, so only the name
    # ("H200 NVL"; "H200 PCIe" in some driver tables) tells the two apart.
    Sheet("H200 NVL", (r"H200[ -]NVL(?:[ -]141 ?GB)?", r"H200[ -]PCIe(?:[ -]141 ?GB)?"),
          fp32=60.0, tf32=417.5, bf16=835.5, fp16=835.5, memory_gb=141, bandwidth_gbs=4800,
          source=H200_DS),
    # H100 SXM: FP32 67; TF32 989*; BF16 1,979*; FP16 1,979* -> 494.5 / 989.5 (the Hopper whitepaper's
    # dense 494.7 / 989.4 agree within 0.05%). 80 GB HBM3, 3,350 GB/s, 132 SMs.
    Sheet("H100 SXM", (r"H100 80 ?GB HBM3", r"H100[ -]SXM5?(?:[ -]80 ?GB)?(?: HBM3)?"),
          fp32=67.0, tf32=494.5, bf16=989.5, fp16=989.5, memory_gb=80, bandwidth_gbs=3350,
          source=H100_DS + "; " + HOPPER_WP, sm_count=132, cuda_cores=16896),
    # H100 PCIe: FP32 51; TF32 756*; BF16 1,513*; FP16 1,513* -> 378 / 756.5. 80 GB HBM2e, 2,000 GB/s, 114 SMs.
    Sheet("H100 PCIe", (r"H100[ -]PCIe(?:[ -]80 ?GB)?", r"H100 80 ?GB HBM2e"),
          fp32=51.0, tf32=378.0, bf16=756.5, fp16=756.5, memory_gb=80, bandwidth_gbs=2000,
          source=H100_DS + "; " + HOPPER_WP, sm_count=114, cuda_cores=14592),
    # H100 NVL (per GPU; the older sheet printed the two-GPU pair): FP32 60; TF32 835*; BF16 1,671*;
    # FP16 1,671* -> 417.5 / 835.5. 94 GB HBM3, 3.9 TB/s, 132 SMs.
    Sheet("H100 NVL", (r"H100[ -]NVL(?:[ -]94 ?GB)?",),
          fp32=60.0, tf32=417.5, bf16=835.5, fp16=835.5, memory_gb=94, bandwidth_gbs=3900,
          source=H100_DS + "; " + H100_NVL_PB, sm_count=132, cuda_cores=16896),
    # --- Ampere data centre -----------------------------------------------------------------------
    # A100 (all four boards): FP32 19.5; TF32 156; BF16 312; FP16 312 (dense, as printed; the starred
    # 312 / 624 are sparse). Bandwidth: 40GB 1,555 GB/s (SXM4 and PCIe); 80GB SXM4 2,039; 80GB PCIe 1,935.
    Sheet("A100 SXM4 40GB", (r"A100[ -]SXM4?[ -]40 ?GB",),
          fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0, memory_gb=40, bandwidth_gbs=1555,
          source=A100_DS + "; " + AMPERE_WP, sm_count=108, cuda_cores=6912),
    Sheet("A100 PCIe 40GB", (r"A100[ -]PCIe[ -]40 ?GB", r"A100 40 ?GB PCIe"),
          fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0, memory_gb=40, bandwidth_gbs=1555,
          source=A100_DS + "; " + AMPERE_WP, sm_count=108, cuda_cores=6912),
    Sheet("A100 SXM4 80GB", (r"A100[ -]SXM4?[ -]80 ?GB",),
          fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0, memory_gb=80, bandwidth_gbs=2039,
          source=A100_DS + "; " + AMPERE_WP, sm_count=108, cuda_cores=6912),
    Sheet("A100 PCIe 80GB", (r"A100 80 ?GB PCIe", r"A100[ -]PCIe[ -]80 ?GB"),
          fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0, memory_gb=80, bandwidth_gbs=1935,
          source=A100_DS + "; " + AMPERE_WP, sm_count=108, cuda_cores=6912),
    # A10: FP32 31.2; TF32 62.5 | 125*; BF16 125 | 250*; FP16 125 | 250*. 24 GB GDDR6, 600 GB/s.
    # 72 SMs = 9,216 CUDA cores / 128 per GA10x SM (72 RT cores, one per SM).
    Sheet("A10", (r"A10",),
          fp32=31.2, tf32=62.5, bf16=125.0, fp16=125.0, memory_gb=24, bandwidth_gbs=600,
          source=A10_DS, sm_count=72, cuda_cores=9216),
    # --- Ada data centre ---------------------------------------------------------------------------
    # L40S: FP32 91.6; TF32 183 | 366*; BF16 362 | 733*; FP16 (FP32 accumulate) 362 | 733*.
    # 48 GB GDDR6 ECC, 864 GB/s. 142 SMs (18,176 CUDA cores / 128; 142 RT cores).
    Sheet("L40S", (r"L40S",),
          fp32=91.6, tf32=183.0, bf16=362.0, fp16=362.0, memory_gb=48, bandwidth_gbs=864,
          source=L40S_DS, sm_count=142, cuda_cores=18176),
    # L4: FP32 30.3; TF32 120*; BF16 242*; FP16 242* -> 60 / 121 dense. 24 GB GDDR6, 300 GB/s.
    # SM count left None, not confirmed: 7,424 CUDA cores would make 58 SMs, but the copy of the sheet
    # read for this lists 60 RT cores (one per SM on Ada), which disagrees.
    Sheet("L4", (r"L4",),
          fp32=30.3, tf32=60.0, bf16=121.0, fp16=121.0, memory_gb=24, bandwidth_gbs=300,
          source=L4_DS, cuda_cores=7424),
    # --- GeForce -----------------------------------------------------------------------------------
    # RTX 3090: FP32 35.6; TF32 35.6/71; BF16 and FP16 with FP32 accumulate 71/142 (GA102 whitepaper),
    # 71.2/142.4 in the RTX Blackwell whitepaper's table, kept here. FP16 with FP16 accumulate
    # (142/284) is not kept. 24 GB GDDR6X, 936 GB/s, 82 SMs, 10,496 CUDA cores.
    Sheet("RTX 3090", (r"(?:GeForce )?RTX 3090",),
          fp32=35.6, tf32=35.6, bf16=71.2, fp16=71.2, memory_gb=24, bandwidth_gbs=936,
          source=GA102_WP + "; " + RTX_BLACKWELL_WP, sm_count=82, cuda_cores=10496),
    # RTX 4080 (16GB): FP32 48.7; 16 GB GDDR6X, 716.8 GB/s; 76 SMs (9,728 CUDA cores / 128).
    # Tensor figures (TF32, BF16 / FP16 with FP32 accumulate) NOT CONFIRMED in the reference search:
    # left None, so tf32 / bf16 / fp16 percentages and ratios are null on a 4080.
    Sheet("RTX 4080", (r"(?:GeForce )?RTX 4080",),
          fp32=48.7, tf32=None, bf16=None, fp16=None, memory_gb=16, bandwidth_gbs=716.8,
          source=ADA_WP, sm_count=76, cuda_cores=9728),
    # RTX 4090: FP32 82.6; TF32 82.6/165.2; BF16 and FP16 with FP32 accumulate 165.2/330.4 (FP16 with
    # FP16 accumulate 330.3/660.6, not kept). 24 GB GDDR6X, 1,008 GB/s, 128 SMs, 16,384 CUDA cores.
    Sheet("RTX 4090", (r"(?:GeForce )?RTX 4090",),
          fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2, memory_gb=24, bandwidth_gbs=1008,
          source=ADA_WP + "; " + RTX_BLACKWELL_WP, sm_count=128, cuda_cores=16384),
    # RTX 5090: FP32 104.8; TF32 104.8/209.5; BF16 and FP16 with FP32 accumulate 209.5/419 (FP16 with
    # FP16 accumulate 419/838, not kept). 32 GB GDDR7, 1,792 GB/s, 170 SMs, 21,760 CUDA cores.
    # Caveat: published torch bf16/fp16 matmuls on a 5090 reach ~235 TFLOP/s, above the whitepaper's
    # FP32-accumulate figure, so pct_of_peak can exceed 100% there. The vendor figure is kept all the same.
    Sheet("RTX 5090", (r"(?:GeForce )?RTX 5090",),
          fp32=104.8, tf32=104.8, bf16=209.5, fp16=209.5, memory_gb=32, bandwidth_gbs=1792,
          source=RTX_BLACKWELL_WP, sm_count=170, cuda_cores=21760),
    # --- professional ------------------------------------------------------------------------------
    # RTX A6000: FP32 38.7; TF32 77.4/154.8; BF16 154.8/309.6; FP16 with FP32 accumulate 154.8/309.6
    # (not halved on the professional GA102 boards). 48 GB GDDR6, 768 GB/s, 84 SMs, 10,752 CUDA cores.
    Sheet("RTX A6000", (r"RTX A6000",),
          fp32=38.7, tf32=77.4, bf16=154.8, fp16=154.8, memory_gb=48, bandwidth_gbs=768,
          source=GA102_WP, sm_count=84, cuda_cores=10752),
    # RTX 6000 Ada: FP32 91.1 (datasheet; its only tensor figure is 1,457 FP8 with sparsity);
    # BF16 with FP32 accumulate 364/728 (RTX PRO Blackwell whitepaper, Ada column). TF32 and FP16 with
    # FP32 accumulate NOT CONFIRMED in the reference search: left None. 48 GB GDDR6, 960 GB/s,
    # 142 SMs (18,176 CUDA cores / 128; 142 RT cores).
    Sheet("RTX 6000 Ada", (r"RTX 6000 Ada(?: Generation)?",),
          fp32=91.1, tf32=None, bf16=364.0, fp16=None, memory_gb=48, bandwidth_gbs=960,
          source=RTX6000ADA_DS + "; " + RTX_PRO_BLACKWELL_WP, sm_count=142, cuda_cores=18176),
)

_BY_MODEL = {s.model: s for s in DATASHEETS}

#: Names that say only the family: the candidates they could be, told apart by memory size and SM count.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"H100", ("H100 SXM", "H100 PCIe", "H100 NVL")),
    (r"H100[ -]80 ?GB", ("H100 SXM", "H100 PCIe")),
    (r"A100", ("A100 SXM4 40GB", "A100 PCIe 40GB", "A100 SXM4 80GB", "A100 PCIe 80GB")),
    (r"A100[ -]SXM4?", ("A100 SXM4 40GB", "A100 SXM4 80GB")),
    (r"A100[ -]PCIe", ("A100 PCIe 40GB", "A100 PCIe 80GB")),
    (r"A100[ -]40 ?GB", ("A100 SXM4 40GB", "A100 PCIe 40GB")),
    (r"A100[ -]80 ?GB", ("A100 SXM4 80GB", "A100 PCIe 80GB")),
)

#: NVML's total memory over the nominal size, in GiB per datasheet GB: HBM boards report ~0.996,
#: GDDR boards with ECC on give up 1/16 (0.9375); anything outside this window is another board
#: (or a MIG slice).
MEMORY_FIT = (0.90, 1.02)


# --------------------------------------------------------------------------- matching
def _normalize(device_name: str) -> str:
    name = " ".join(str(device_name).split())
    return re.sub(r"^NVIDIA\s+", "", name, flags=re.IGNORECASE)


def _matches(patterns, name: str) -> bool:
    return any(re.fullmatch(p, name, flags=re.IGNORECASE) for p in patterns)


def _fits(sheet: Sheet, memory_bytes, sm_count) -> bool:
    if memory_bytes:
        ratio = (float(memory_bytes) / 2**30) / sheet.memory_gb
        if not MEMORY_FIT[0] <= ratio <= MEMORY_FIT[1]:
            return False
    if sm_count and sheet.sm_count is not None and int(sm_count) != sheet.sm_count:
        return False
    return True


def _seen(memory_bytes, sm_count) -> str:
    parts = []
    if memory_bytes:
        parts.append(f"{float(memory_bytes) / 2**30:.1f} GiB")
    if sm_count:
        parts.append(f"{int(sm_count)} SMs")
    return " and ".join(parts)


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def resolve(device_name: str | None, *, memory_bytes: int | None = None,
            sm_count: int | None = None) -> tuple[dict | None, str | None]:
    """(the sheet as a dict, None), or (None, why there is none); (None, None) for no name at all."""
    if not device_name or not str(device_name).strip():
        return None, None
    name = _normalize(device_name)
    if re.search(r"\bMIG\b", name, flags=re.IGNORECASE):
        return None, (f"{device_name!r} is a MIG instance: it has a fraction of the GPU's units and no "
                      "datasheet peak of its own")
    candidates = [s for s in DATASHEETS if _matches(s.names + (re.escape(s.model),), name)]
    if not candidates:
        for pattern, models in FAMILIES:
            if re.fullmatch(pattern, name, flags=re.IGNORECASE):
                candidates = [_BY_MODEL[m] for m in models]
                break
    if not candidates:
        return None, f"no datasheet entry for {device_name!r}"
    fitting = [s for s in candidates if _fits(s, memory_bytes, sm_count)]
    if len(fitting) == 1:
        return fitting[0].as_dict(), None
    if not fitting:
        return None, (f"{device_name!r} with {_seen(memory_bytes, sm_count)} fits no datasheet entry for it "
                      f"({_or([s.describe() for s in candidates])})")
    if len({s.figures() for s in fitting}) == 1:
        # every board it could be has the same figures (e.g. A100 40GB, SXM4 or PCIe): no guess needed
        sheet = fitting[0].as_dict()
        sheet["model"] = " or ".join(s.model for s in fitting)
        sheet["source"] = "; ".join(dict.fromkeys(s.source for s in fitting))
        return sheet, None
    given = _seen(memory_bytes, sm_count)
    if len({(s.memory_gb, s.sm_count) for s in fitting}) == len(fitting):
        hint = "its memory size and SM count from NVML tell them apart"
    else:
        hint = "memory size and SM count do not tell them apart; the full NVML name does"
    return None, (f"{device_name!r}{' with ' + given if given else ''} could be "
                  f"{_or([s.describe() for s in fitting])}, whose figures differ; {hint}")


def datasheet(device_name: str | None, *, memory_bytes: int | None = None, sm_count: int | None = None) -> dict | None:
    """The datasheet entry of a device, or None (no entry, a MIG slice, or a name that cannot be resolved).

    A dict with "model", the precision keys (fp32, tf32, bf16, fp16: dense TFLOP/s or None), "memory_gb",
    "bandwidth_gbs", "source" and, where known, "cuda_cores" and "sm_count". `memory_bytes` (NVML's
    total memory) and `sm_count` resolve a family name such as "NVIDIA H100" and reject a named board
    whose memory or SM count contradicts its entry.
    """
    return resolve(device_name, memory_bytes=memory_bytes, sm_count=sm_count)[0]


def peak_tflops(device_name: str | None, precision: str, *, memory_bytes: int | None = None,
                sm_count: int | None = None) -> float | None:
    """Dense datasheet peak TFLOP/s of the device for a precision (fp32, tf32, bf16, fp16), or None."""
    sheet = datasheet(device_name, memory_bytes=memory_bytes, sm_count=sm_count)
    return sheet.get(precision) if sheet else None


def pct_of_peak(tflops: float | None, device_name: str | None, precision: str, *,
                memory_bytes: int | None = None, sm_count: int | None = None) -> float | None:
    """Achieved TFLOP/s as percent of the datasheet peak, or None where either is unknown."""
    peak = peak_tflops(device_name, precision, memory_bytes=memory_bytes, sm_count=sm_count)
    if tflops is None or not peak:
        return None
    return 100.0 * tflops / peak


def unknown_device_warning(device_name: str | None, *, memory_bytes: int | None = None,
                           sm_count: int | None = None, precision: str | None = None) -> str | None:
    """A warning line naming why a device's datasheet figures are null, or None when they are not.

    None for a device with an entry (and, given `precision`, a figure for it) and for no name at all.
    Meant for GPU devices: a CPU has no entry either, and callers need not warn about that.
    """
    sheet, why = resolve(device_name, memory_bytes=memory_bytes, sm_count=sm_count)
    if sheet is None:
        return f"{why}: pct_of_peak and datasheet ratios are null" if why else None
    if precision is not None and sheet.get(precision) is None:
        return (f"datasheet entry {sheet['model']} has no confirmed {precision} figure: "
                f"pct_of_peak and datasheet ratios for {precision} are null")
    return None
