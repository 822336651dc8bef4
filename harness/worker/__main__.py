"""`python -m harness.worker SPEC.json RESULT.json` (or `--ahead BACKEND RUN_DIR RUNNER_PID`)."""

from harness.worker.exit import exit_now
from harness.worker.main import main

exit_now(main())
