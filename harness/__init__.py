"""harness: the same deep-learning benchmark through PyTorch and TensorFlow, timed correctly.

The core never imports a framework; backends do, inside their worker process.
"""

__version__ = "0.1.0"


def load_results(store=None, *, session=None):
    """Every result record in the store (default harness.db / HARNESS_STORE) as a pandas DataFrame."""
    from harness.store import load_results as _load

    return _load(store, session=session)


__all__ = ["__version__", "load_results"]
