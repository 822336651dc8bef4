"""Planning and running sessions.

plan (the runs of a scenario), runner (the loop over the plan, one worker process per run) and its parts:
worker_process (a worker's environment, files, wait and record), progress, ahead (workers started ahead, the
overlap), compile_cache, unsupported (runs answered without a worker), dataparallel (a data-parallel run's
launch and one record from its replicas), interrupt (SIGINT/SIGTERM); executors (Slurm jobs instead of local
workers); capacity (the largest batch that fits) with its search, its answer and its settings; forecast (what
to expect before a session), limits (--memory-limit, --timeout, --time-limit), start and resume (a new
session's plan, a stored session's rest), and app: the application layer that prepares, runs and finishes a
session, callable from Python without the command line (request: the values it takes and gives).
"""
