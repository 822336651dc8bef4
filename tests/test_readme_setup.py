"""The README keeps its word about setup: the GPU target it names exists and builds the GPU pair, and
make says how to call harness once the environment is built."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(*args: str) -> str:
    """What `make -n ARGS` would run, with a venv that does not exist (so the pair is not taken from one)."""
    done = subprocess.run(["make", "-n", "VENV=/nonexistent-venv", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pins(name: str) -> dict:
    out = {}
    for line in (ROOT / "constraints" / name).read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*(\S+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


@needs_make
def test_every_make_target_the_readme_names_exists():
    named = set(re.findall(r"`make ([a-z-]+)`", README)) | set(re.findall(r"^make ([a-z-]+)", README, re.M))
    assert {"quickstart", "test", "setup-gpu"} <= named
    for target in named:
        dry_run(target)  # make -n fails on a target that does not exist


@needs_make
def test_setup_gpu_builds_the_gpu_pair_and_says_how_to_run_harness():
    out = dry_run("setup-gpu")
    assert "scripts/make-env.sh /nonexistent-venv gpu" in out
    assert "/nonexistent-venv/bin/harness" in out and "source /nonexistent-venv/bin/activate" in out


@needs_make
def test_setup_and_quickstart_say_how_to_run_harness():
    for target in ("setup", "quickstart"):
        out = dry_run(target)
        assert "scripts/make-env.sh /nonexistent-venv current" in out
        assert "/nonexistent-venv/bin/harness" in out and "source /nonexistent-venv/bin/activate" in out


@needs_make
def test_each_target_says_how_to_run_harness_once():
    for target in ("setup", "setup-gpu", "quickstart", "test"):
        assert dry_run(target).count("source /nonexistent-venv/bin/activate") == 1, target


@needs_make
def test_a_venv_built_for_gpus_stays_the_gpu_pair(tmp_path):
    (tmp_path / ".harness-env").write_text("pair=gpu\nconstraints=x\nsetup_cfg=y\n", encoding="utf-8")
    done = subprocess.run(["make", "-n", f"VENV={tmp_path}", "setup"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert f"scripts/make-env.sh {tmp_path} gpu" in done.stdout


def test_the_gpu_pair_is_the_current_pair_with_tensorflows_gpu_build():
    current, gpu = pins("current.txt"), pins("gpu.txt")
    assert gpu.pop("tensorflow") == current.pop("tensorflow-cpu")
    assert gpu == current
    script = (ROOT / "scripts" / "make-env.sh").read_text(encoding="utf-8")
    assert re.search(r'\[ "\$PAIR" = gpu \] && FRAMEWORKS="[^"]*tensorflow\[and-cuda\]', script)


def test_the_readme_says_what_the_environment_costs():
    opening = README.split("\n## Set-up\n", 1)[1].split("\n## ", 1)[0]
    for words in ("CUDA build", "7.9 GB", "3.2 GB", "JAX", "2-5 minutes", "about 25 minutes on 2 cores",
                  ".venv/bin/harness", "source .venv/bin/activate", "make setup-gpu"):
        assert words in opening, words
    assert "pip install -e '.[torch,tf]'" not in README  # the old GPU advice, which make-env never followed
