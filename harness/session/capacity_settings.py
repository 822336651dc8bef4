"""A capacity search's settings for a scenario: start, limit and resolution, from its `capacity:` block and
the --capacity-* flags, checked against what its configurations can train at before anything runs."""

from __future__ import annotations

from typing import Callable

from pydantic import ValidationError

from harness.errors import InputError
from harness.scenario.schema import Capacity
from harness.session.capacity import capacity_key


def _validated(scenario, flags: dict) -> Capacity:
    """The file's capacity block overridden by the flags (the --capacity-* given), validated (InputError naming
    the flag or key)."""
    settings = {**(scenario.capacity or Capacity()).model_dump(), **flags}
    try:
        return Capacity.model_validate(settings)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else "start"
        flag = f"--capacity-{key}" if key in flags else f"capacity.{key}"
        raise InputError(f"{flag} {settings[key] if key in settings else ''}: {error['msg']}", field=flag) from None


def _refusals(judged: list, runner, n: int) -> list[tuple]:
    """(spec, reason) of each configuration its backend refuses to train at batch n."""
    out = []
    for spec in judged:
        status = runner.static_status(spec.with_params(batch_size=n))
        if status is not None and status[0] == "unsupported":
            out.append((spec, status[1]))
    return out


def capacity_settings(scenario, flags: dict, specs, runner, notice: Callable[[str], None]) -> Capacity:
    """The capacity search's start, limit and resolution for a scenario's configurations: the file's
    `capacity:` block, overridden by --capacity-*; InputError (exit 2) before anything runs for a
    start no configuration can train at, or a limit below the start.

    A start the user chose (the flag, or the file's capacity.start) that a backend refuses to train
    at (torch's BatchNorm at batch 1) is refused, naming it and the reason. The default start (1)
    moves up to the smallest batch every configuration can train at, with a note through `notice`.
    """
    settings = _validated(scenario, flags)
    block = scenario.capacity

    def named(key: str) -> str:
        return f"--capacity-{key}" if key in flags else f"{scenario.name}: capacity.{key}"

    if settings.limit < settings.start:
        raise InputError(f"{named('limit')} {settings.limit} is below the start, {settings.start} "
                         f"({named('start')}): nothing to search", field=named("limit"))
    configs = {}
    for spec in specs:
        configs.setdefault(capacity_key(spec), spec)
    # a configuration that cannot run at all is recorded as such by its search; only the start is judged here
    judged = [spec for spec in configs.values() if runner.static_status(spec) is None]
    start = settings.start
    refused = _refusals(judged, runner, start)
    if not refused:
        return settings
    spec, reason = refused[0]
    if "start" in flags or (block is not None and "start" in block.model_fields_set):
        raise InputError(f"{named('start')} {start}: {spec.backend} on {spec.device} cannot train "
                         f"{spec.workload} at batch_size={start}: {reason}; give a start it can train at",
                         field=named("start"))
    n = start
    while refused and n < min(settings.limit, start + 64):  # a start a few batches up, or none
        n += 1
        refused = _refusals(judged, runner, n)
    if refused:
        raise InputError(f"--find-max-batch: {spec.backend} on {spec.device} cannot train {spec.workload} at any "
                         f"batch_size from {start} to {n}: {reason}; give --capacity-start N",
                         field="--find-max-batch")
    notice(f"note: {scenario.name}: the capacity search starts at batch_size={n}, not {start}: "
           f"{spec.backend} on {spec.device}: {reason} (--capacity-start N chooses the start)")
    return settings.model_copy(update={"start": n})
