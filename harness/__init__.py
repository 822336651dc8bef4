"""harness: the same deep-learning benchmark through PyTorch and TensorFlow, timed correctly.

The core never imports a framework; backends do, inside their worker process.
"""

__version__ = "0.1.0"


def load_results(store=None, *, session=None):
    """Every result record in the store (default harness.db / HARNESS_STORE) as a pandas DataFrame."""
    # deferred on purpose: every worker imports this package, and the store (with pandas) is no part of a run
    from harness.results.store import load_results as _load

    return _load(store, session=session)
