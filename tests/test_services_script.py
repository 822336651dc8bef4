"""scripts/services.sh, the script that starts the test services: as another user than root it says it needs root
and changes nothing (`stop` included); as root, `--env` prints only the settings, for eval. Its `stop` is not run
here: the services are the machine's, and other test runs may be using them."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "services.sh"


def _as_nobody(*args):
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root to run the script as another user")
    return subprocess.run(["runuser", "-u", "nobody", "--", "bash", str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args", [(), ("--env",), ("stop",)])
def test_the_script_says_it_needs_root_and_changes_nothing_as_another_user(args):
    before = subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout if shutil.which(
        "scontrol") else ""
    done = _as_nobody(*args)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("services: needs root") and "nothing was changed" in line and "sudo " in line
    after = subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout if shutil.which(
        "scontrol") else ""
    assert after == before


def test_env_prints_only_the_settings_for_eval():
    if os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("pg_ctlcluster") is None:
        pytest.skip("the services are not installed here, or this is not root")
    done = subprocess.run(["bash", str(SCRIPT), "--env"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("export HARNESS_TEST_POSTGRES='postgresql://")
    assert len(done.stdout.strip().splitlines()) == 1
