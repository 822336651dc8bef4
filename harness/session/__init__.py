"""Planning and running sessions.

plan (the runs of a scenario), runner (one worker process per run), dataparallel (a data-parallel run's one
record from its replicas), capacity (the largest batch that fits) and its settings, forecast (what to expect
before a session), limits (--memory-limit, --timeout), start and resume (a new session's plan, a stored
session's rest), and app: the application layer that prepares, runs and finishes a session, callable from
Python without the command line (request: the values it takes and gives).
"""
