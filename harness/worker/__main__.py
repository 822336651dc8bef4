"""`python -m harness.worker SPEC.json RESULT.json` (or `--ahead BACKEND RUN_DIR RUNNER_PID`)."""

from harness.worker.exit import die_with_parent, exit_now

die_with_parent()  # before the imports below, which take a while: the window in which a parent's death goes unseen

from harness.worker.main import main  # noqa: E402 - after the parent-death signal is set, said above

exit_now(main())
