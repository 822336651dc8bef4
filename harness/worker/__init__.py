"""One run inside its own process: the timed loop, the core's half of the backend seam, the process entry.

`python -m harness.worker SPEC.json RESULT.json` runs one run (harness.worker.main)."""
