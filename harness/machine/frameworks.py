"""The frameworks an environment can run, from package metadata (nothing is imported), and whether it holds one
TensorFlow build.

TensorFlow ships under several distribution names (tensorflow, tensorflow-cpu, tf-nightly...) that install the
same files. A second one installed over the first (tf_keras requires `tensorflow`, so resolving it beside
tensorflow-cpu brings the GPU build) overwrites those files in place: both stay installed and neither owns what
is on disk. `tensorflow_problems()` says so; scripts/make-env.sh and `harness env` use it.
"""

from __future__ import annotations

import importlib.metadata as md

#: The distribution names TensorFlow's own files come in; an environment should hold one of them.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                            "tensorflow-aarch64", "intel-tensorflow", "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu")
#: Files every TensorFlow build installs: each must be recorded by the one TensorFlow distribution installed.
TENSORFLOW_FILES = ("tensorflow/__init__.py", "tensorflow/libtensorflow_cc.so.2", "tensorflow/libtensorflow_framework.so.2")
#: The framework packages `harness env` names, in its order (`tensorflow`: every TensorFlow distribution installed).
#: Those of REQUIRED are named where absent too.
FRAMEWORKS = ("torch", "torchvision", "tensorflow", "keras", "tf-keras", "jax", "jaxlib", "flax", "optax")
REQUIRED = ("torch", "keras")
#: The entry-point groups a plugin registers in (harness.seam): their distributions are the plugin packages.
PLUGIN_GROUPS = ("harness.backends", "harness.workloads", "harness.stores")


def _name(dist: md.Distribution) -> str:
    # metadata names are spelt as published (tf_keras, Flax): compare them normalised (PEP 503)
    return (dist.metadata["Name"] or "").lower().replace("_", "-").replace(".", "-")


def tensorflow_distributions(path: list[str] | None = None) -> dict[str, str]:
    """Every TensorFlow distribution installed (on `path`, default sys.path), by name: its version."""
    found = {}
    for dist in md.distributions(**({"path": path} if path is not None else {})):
        if _name(dist) in TENSORFLOW_DISTRIBUTIONS:
            found.setdefault(_name(dist), dist.version)
    return dict(sorted(found.items()))


def file_owners(files: tuple[str, ...] = TENSORFLOW_FILES, path: list[str] | None = None) -> dict[str, list[str]]:
    """For each of `files` (paths inside site-packages), the distributions whose RECORD lists it."""
    owners: dict[str, set[str]] = {f: set() for f in files}
    for dist in md.distributions(**({"path": path} if path is not None else {})):
        for entry in dist.files or ():
            if str(entry.as_posix()) in owners:
                owners[entry.as_posix()].add(_name(dist))
    return {f: sorted(names) for f, names in owners.items()}


def tensorflow_problems(path: list[str] | None = None) -> list[str]:
    """What is wrong with the environment's TensorFlow: a second distribution, or its files recorded by another."""
    installed = tensorflow_distributions(path)
    problems = []
    if len(installed) > 1:
        names = ", ".join(f"{name} {version}" for name, version in installed.items())
        problems.append(f"{len(installed)} TensorFlow distributions are installed ({names}): the one installed "
                        "last overwrote the others' files; rebuild the environment (scripts/make-env.sh) with one")
    for file, owners in file_owners(path=path).items():
        if owners and (len(installed) != 1 or owners != list(installed)):
            problems.append(f"{file} is recorded by {', '.join(owners)}, not by the TensorFlow distribution "
                            f"installed ({', '.join(installed) or 'none'}) alone")
    return problems


def plugin_packages() -> dict[str, str]:
    """The distributions other than harness that register a backend, workload or store, by name: version."""
    try:
        entries = [entry for group in PLUGIN_GROUPS for entry in md.entry_points(group=group)]
    except TypeError:  # Python 3.9: entry points are not selected by group, nor name their distribution
        return {}
    found = {_name(e.dist): e.dist.version for e in entries if e.dist is not None and _name(e.dist) != "harness"}
    return dict(sorted(found.items()))


def framework_versions() -> dict[str, str | None]:
    """The framework and plugin packages this environment can run, by name: version (None for an absent one of
    torch, TensorFlow and keras). Every TensorFlow distribution installed is named, in TensorFlow's place."""
    out: dict[str, str | None] = {}
    for name in FRAMEWORKS:
        if name == "tensorflow":
            out.update(tensorflow_distributions() or {"tensorflow": None})
            continue
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            if name in REQUIRED:
                out[name] = None
    return {**out, **plugin_packages()}
