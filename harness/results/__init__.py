"""Results: the typed record, the store it lives in, statistics of samples, and comparison with verdicts."""
