from harness.cli import run

run()
