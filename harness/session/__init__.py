"""Planning and running sessions: the plan of runs, the runner that executes it (one worker per run),
capacity searches, and the application layer the CLI calls."""
