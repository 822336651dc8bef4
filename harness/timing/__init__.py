"""Measuring, framework-free and below the backend seam: the `measure:` settings, the timed loop and its clocks,
the statistics of samples, and the profile's capture and classes. The seam, the worker and compare import it."""
