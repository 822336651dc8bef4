"""The environment scripts/make-env.sh builds holds one TensorFlow build, whose files are its own, and `harness env`
names every framework and plugin package in it.

The first test reads the environment the suite runs in (the one `make setup` built), by package metadata alone:
it fails where a second TensorFlow distribution was installed over the first.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from harness.machine.frameworks import tensorflow_problems

ROOT = Path(__file__).resolve().parent.parent
#: Every name TensorFlow's files are published under (PEP 503 normalised).
TENSORFLOWS = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
               "tensorflow-aarch64", "intel-tensorflow", "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu"}
FRAMEWORK_FILES = {"tensorflow/__init__.py", "tensorflow/libtensorflow_cc.so.2"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _env_json() -> dict:
    shown = CliRunner().invoke(main, ["env", "--json"])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.output)


def test_this_environment_holds_one_tensorflow_that_owns_its_files():
    installed = {_normal(d.metadata["Name"]) for d in md.distributions()} & TENSORFLOWS
    assert len(installed) <= 1, f"{sorted(installed)} are all installed: the last overwrote the others' files"
    reported = {name for name, version in _env_json()["frameworks"].items() if name in TENSORFLOWS and version}
    assert reported == installed
    for dist in md.distributions():
        recorded = {str(f.as_posix()) for f in dist.files or ()} & FRAMEWORK_FILES
        assert not recorded or {_normal(dist.metadata["Name"])} == reported, \
            f"{sorted(recorded)} recorded by {dist.metadata['Name']}, not by {sorted(reported)}"


def test_harness_env_names_every_framework_and_plugin_installed():
    frameworks = _env_json()["frameworks"]
    for name in ("torch", "torchvision", "keras", "tf_keras", "jax", "jaxlib", "flax", "optax", "harness-jax",
                 "harness-mlp"):
        try:
            installed = md.version(name)
        except md.PackageNotFoundError:
            installed = None
        assert frameworks.get(_normal(name)) == installed, name
    shown = CliRunner().invoke(main, ["env"]).output
    assert all(re.search(rf"^{re.escape(n)} +{re.escape(v)}$", shown, re.M) for n, v in frameworks.items() if v)


def _dist(site: Path, name: str, files: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-2.21.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 2.21.0\n", encoding="utf-8")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files), encoding="utf-8")


def test_a_second_tensorflow_or_a_foreign_owner_of_its_files_is_a_problem(tmp_path):
    one, two, foreign = tmp_path / "one", tmp_path / "two", tmp_path / "foreign"
    for site in (one, two, foreign):
        site.mkdir()
        _dist(site, "tensorflow-cpu", sorted(FRAMEWORK_FILES))
    assert tensorflow_problems(path=[str(one)]) == []
    _dist(two, "tensorflow", sorted(FRAMEWORK_FILES))
    problems = tensorflow_problems(path=[str(two)])
    assert "2 TensorFlow distributions are installed (tensorflow 2.21.0, tensorflow-cpu 2.21.0)" in problems[0]
    assert "tensorflow/libtensorflow_cc.so.2 is recorded by tensorflow, tensorflow-cpu" in " ".join(problems)
    _dist(foreign, "some-repack", ["tensorflow/__init__.py"])
    assert tensorflow_problems(path=[str(foreign)]) == [
        "tensorflow/__init__.py is recorded by some-repack, tensorflow-cpu, not by the TensorFlow distribution "
        "installed (tensorflow-cpu) alone"]


def test_make_env_installs_tf_keras_without_resolving_its_tensorflow():
    script = (ROOT / "scripts" / "make-env.sh").read_text(encoding="utf-8")
    frameworks = " ".join(re.findall(r'FRAMEWORKS="([^"]*)"', script))
    assert "tf_keras" not in frameworks and "tensorflow-cpu" in frameworks
    assert re.search(r'pip install [^\n]*--no-deps \$TF_KERAS', script)
    assert "tensorflow_problems" in script  # the build fails where two TensorFlow builds are installed
