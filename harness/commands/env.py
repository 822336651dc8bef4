"""`harness env`: the environment results would be measured in."""

from __future__ import annotations

import json
import shutil
import textwrap

import click

from harness.machine.env import Environment, capture
from harness.machine.envcheck import environment_warnings
from harness.machine.frameworks import framework_versions


@click.command("env")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def command(as_json: bool) -> None:
    """Show python, the frameworks and plugins installed, CUDA driver, GPU and CPU details and the machine's load.

    Nothing is imported: versions come from package metadata.
    """

    env = capture()
    env["frameworks"] = framework_versions()
    env["warnings"] = environment_warnings(env)
    if as_json:
        click.echo(json.dumps(env, indent=2, default=str))
        return
    typed = Environment.of(env)
    click.echo(f"python      {env['python']} ({env['executable']})")
    click.echo(f"platform    {env['platform']}")
    click.echo(f"cpu         {env['cpu']} x {env['cpu_count']} ({typed.cpu_usable or '?'} usable), "
               f"governor {env['cpu_governor'] or 'unknown'}")
    load = typed.load_average
    click.echo("load        " + (" ".join(f"{x:.2f}" for x in load) + " (1, 5, 15 min)" if load else "unknown"))
    mem = env["memory_total_bytes"]
    click.echo(f"memory      {mem / 1024**3:.1f} GiB" if mem else "memory      unknown")
    # the frameworks and plugins that can run, then what else a result depends on (a record's env.packages)
    others = {k: env["packages"].get(k) for k in ("numpy", "nvidia-ml-py", "harness")}
    for name, version in {**env["frameworks"], **others}.items():
        click.echo(f"{name:<15} {version or 'not installed'}")
    click.echo(f"driver      {env['driver'] or 'no NVIDIA driver / NVML'}")
    for gpu in env["gpus"]:
        click.echo(f"gpu {gpu['index']}       {gpu['name']}, {gpu['memory_total_bytes'] / 1024**3:.0f} GiB, "
                   f"{gpu['memory_used_bytes'] / 1024**3:.1f} GiB used")
    procs = typed.gpu_processes
    if procs is not None:
        others = {i: p for i, p in procs.items() if p}
        click.echo("gpu procs   " + ("; ".join(f"GPU {i}: pids {', '.join(str(x['pid']) for x in p)}"
                                               for i, p in sorted(others.items())) or "none other than this one"))
    for key, value in env["variables"].items():
        click.echo(f"{key}={value}")
    width = max(40, shutil.get_terminal_size(fallback=(120, 24)).columns)
    for warning in env["warnings"]:
        click.echo(textwrap.fill(f"warning: {warning}", width=width, subsequent_indent="  ", break_long_words=False))
