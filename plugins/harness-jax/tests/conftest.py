"""The plugin's tests run from the repository root: `.venv/bin/python -m pytest plugins/harness-jax/tests`.

They need harness (the repository root on sys.path, as pytest's rootdir conftest puts it there for the
core's own tests) and the plugin (installed with `pip install -e plugins/harness-jax`, or on sys.path).
"""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN = Path(__file__).resolve().parent.parent
ROOT = PLUGIN.parent.parent

for path in (str(ROOT), str(PLUGIN)):
    if path not in sys.path:
        sys.path.insert(0, path)

# torch before anything that may pull in TensorFlow (tests/conftest.py says why); also the torchvision
# comparison in test_model.py runs torch in its own process
try:
    import torch  # noqa: F401
except ImportError:
    pass
