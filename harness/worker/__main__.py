"""`python -m harness.worker SPEC.json RESULT.json` (or `--ahead BACKEND RUN_DIR RUNNER_PID`)."""

from harness.worker.main import exit_now, main

exit_now(main())
