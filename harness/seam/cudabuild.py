"""Whether a framework's CUDA build can run on a GPU: the architectures its kernels were built for against
the device's compute capability, compared the way the CUDA driver loads them.

- `sm_XY` (machine code) runs on a GPU of the same major version and a minor version at least Y (`sm_80`
  runs on 8.0, 8.6, 8.9, never on 9.0); `sm_XYa` only on X.Y itself.
- `compute_XY` (PTX) is compiled by the driver for any GPU of compute capability X.Y or above: it runs,
  but its first use compiles every kernel (minutes for a large framework; cached afterwards).

A build with neither for the GPU cannot run a single kernel there (PyPI's torch 2.0.1 has sm_37 to sm_86:
nothing an H100 or H200, 9.0, can load). Each backend's device asks this of its own build
(`Device.check_build`) as soon as its framework is imported, before any kernel runs.
"""

from __future__ import annotations

import re
from typing import Iterable

from harness.errors import Unsupported

_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")
_DOTTED = re.compile(r"^(\d+)\.(\d+)$")


def parse_arch(text: str) -> tuple[str, int, int, bool] | None:
    """(`sm` or `compute`, major, minor, only that exact version) of `sm_86`, `compute_80`, `sm_90a` or `8.6`
    (a bare version is machine code); None for anything else."""
    text = str(text).strip().lower()
    if match := _ARCH.match(text):
        return match[1], int(match[2]), int(match[3]), bool(match[4])
    if match := _DOTTED.match(text):
        return "sm", int(match[1]), int(match[2]), False
    return None


def check_cuda_build(built: str, archs: Iterable[str], capability: tuple[int, int] | None, device: str) -> list[str]:
    """The warnings of a build that runs on the GPU only by compiling PTX (empty where it has machine code for
    it); Unsupported, saying what the build has and what the GPU is, where it has neither. `built` names the
    framework and its version, `archs` its build's architectures (none known: nothing is checked)."""
    parsed = [(text, parse_arch(text)) for text in archs]
    parsed = [(text, arch) for text, arch in parsed if arch is not None]
    if not parsed or capability is None:
        return []
    major, minor = capability
    for _, (kind, a_major, a_minor, exact) in parsed:
        if kind == "sm" and a_major == major and (a_minor == minor if exact else a_minor <= minor):
            return []
    ptx = [text for text, (kind, a_major, a_minor, _) in parsed if kind == "compute" and (a_major, a_minor) <= capability]
    listed = ", ".join(text for text, _ in parsed)
    if ptx:
        return [f"{built} has no machine code for {device} (compute capability {major}.{minor}; built for {listed}): "
                f"the CUDA driver compiles its kernels from PTX ({ptx[-1]}) on first use, so each process's first "
                "steps include compiling them (harness gives every worker process an empty driver cache of its own)"]
    raise Unsupported(f"{built} cannot run on {device}: the GPU has compute capability {major}.{minor}, and this build "
                      f"has kernels for {listed} only, none of which it can load (no machine code for sm_{major}{minor}, "
                      "no PTX to compile for it). Install a build made for this GPU")
