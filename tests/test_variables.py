"""The environment variables harness reads (harness.machine.variables): declared once, typed, read when asked."""

from __future__ import annotations

import pytest

from harness.errors import InputError
from harness.machine.variables import Variables, variables


def test_a_variable_is_read_when_asked_not_when_harness_was_imported(monkeypatch):
    monkeypatch.delenv("HARNESS_STORE", raising=False)
    assert variables().store is None
    monkeypatch.setenv("HARNESS_STORE", "elsewhere.db")  # as a runner sets one for its worker, after the import
    assert variables().store == "elsewhere.db"


def test_values_come_typed_and_an_empty_one_is_unset_except_where_empty_means_no_gpu():
    given = variables({"HARNESS_NNODES": "2", "HARNESS_PAUSE_PIDS": "12,x, 7,", "HARNESS_STORE_INIT": "1",
                       "HARNESS_REPLICA": "yes", "WORLD_SIZE": "", "HARNESS_RDZV_ID": "", "CUDA_VISIBLE_DEVICES": "",
                       "UNRELATED": "kept out"})
    assert (given.nnodes, given.pause_pids, given.store_init) == (2, (12, 7), True)
    assert given.replica is False  # a switch is on only at 1, as harness has always read them
    assert (given.world_size, given.rdzv_id) == (1, None)  # empty: the default
    assert given.cuda_visible_devices == ""  # empty: no GPU visible, not "unset"


def test_a_malformed_value_is_an_input_error_naming_the_variable():
    with pytest.raises(InputError) as refused:
        variables({"HARNESS_MEMORY_LIMIT_BYTES": "4GiB"})
    assert refused.value.field == "HARNESS_MEMORY_LIMIT_BYTES" and "'4GiB'" in str(refused.value)
    assert len(str(refused.value).splitlines()) == 1


def test_every_variable_is_declared_with_its_name_and_a_description():
    names = [field.alias for field in Variables.model_fields.values()]
    assert len(names) == len(set(names)) and "HARNESS_HOST_LOCK" in names and "HARNESS_BACKENDS" in names
    assert all(field.description for field in Variables.model_fields.values())
