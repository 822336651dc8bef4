"""The store seam: a store is chosen by its location's scheme from the `harness.stores` entry points, a plugin's
store is used by the whole product, the journal implements the Store protocol itself, and a location nothing
serves is one line and exit 2."""

import configparser
import inspect
import json
import os

import pytest

from harness.errors import StoreError
from harness.results.sessions import StoredSession
from harness.results.store import (
    SQLiteStore,
    Store,
    open_store,
    parse_location,
    redact,
    registry,
    store_exists,
)
from harness.results.store.contract import StoreClass
from harness.results.store.postgres import PostgresStore
from harness.session.journal import Journal
from tests.fake_store import JsonFileStore
from tests.specs import planned
from tests.test_reliability import _fake_scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _members(protocol) -> list[str]:
    """Every attribute and method a protocol declares (its own dunders: only __enter__ and __exit__)."""
    own = [n for n in vars(protocol) if not n.startswith("_") or n in ("__enter__", "__exit__")]
    return sorted({*own, *protocol.__annotations__})


def _install_plugin(folder, entries: dict[str, str]) -> str:
    """A distribution's metadata in `folder` registering `entries` (scheme -> module:Class) as harness.stores, as
    `pip install` of a store plugin leaves it; the folder, to put on the path."""
    info = folder / "harness_teststores-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: harness-teststores\nVersion: 0.1\n")
    lines = "".join(f"{scheme} = {target}\n" for scheme, target in entries.items())
    (info / "entry_points.txt").write_text(f"[harness.stores]\n{lines}")
    return str(folder)


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The test store plugins, installed by entry point for this process and the commands it starts."""
    site = _install_plugin(tmp_path / "site", {"jsonfile": "tests.fake_store:JsonFileStore",
                                               "broken": "tests.no_such_module:Store",
                                               "notastore": "tests.fake_store:NotAStore"})
    monkeypatch.syspath_prepend(site)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [site, ROOT, os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(registry, "BROKEN", {})
    return site


# --------------------------------------------------------------------------- the registry
def test_a_store_plugin_registered_under_a_scheme_is_chosen_for_a_url_of_that_scheme(plugins, tmp_path):
    url = f"JsonFile://{tmp_path / 'r.json'}"  # schemes match in any case
    assert not store_exists(url)
    assert isinstance(registry.store_class(parse_location(url)), StoreClass)
    with open_store(url) as store:
        assert type(store) is JsonFileStore and isinstance(store, Store)
        store.begin_session("s1", [], scenario_path=None, command="c")
    assert store_exists(url)
    with open_store(url, readonly=True) as store:
        assert [s.session_id for s in store.sessions()] == ["s1"]
    assert type(open_store(tmp_path / "a.db")) is SQLiteStore  # the built-ins are still there


def test_a_whole_session_runs_into_a_plugin_store_and_the_commands_read_it(plugins, tmp_path, fake_backend,
                                                                           write_scenario, harness_cli):
    url = f"jsonfile://{tmp_path / 'run.json'}"
    code, _, err = harness_cli("run", _fake_scenario(write_scenario, tmp_path, 3), "--store", url, "-q")
    assert code == 0, err
    with open_store(url, readonly=True) as store:
        (session,) = store.sessions()
        assert session.state == "finished" and session.results == session.ok == 3
    code, out, err = harness_cli("results", "--store", url, "--format", "json")
    assert code == 0, err
    assert sorted(r["params"]["batch"] for r in json.loads(out)) == [1, 2, 3]
    code, out, err = harness_cli("compare", "--store", url, "--by", "batch")
    assert code == 0 and "batch" in out, err


def test_harness_stores_registers_a_store_under_development_and_wins_over_the_entry_points(plugins, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setenv("HARNESS_STORES", "dev=tests.fake_store:JsonFileStore, broken = tests.fake_store:JsonFileStore")
    with open_store(f"dev://{tmp_path / 'd.json'}") as store:
        assert type(store) is JsonFileStore
    assert type(open_store(f"broken://{tmp_path / 'b.json'}")) is JsonFileStore


def test_a_broken_store_plugin_is_reported_when_its_scheme_is_used_and_the_others_still_open(plugins, tmp_path):
    with pytest.raises(StoreError) as broken:
        open_store("broken://somewhere")
    message = str(broken.value)
    assert "failed to load: ModuleNotFoundError" in message and "tests.no_such_module" in message
    assert len(message.splitlines()) == 1 and "broken" in registry.BROKEN
    with pytest.raises(StoreError, match="not a store class"):
        open_store("notastore://x")
    with open_store(f"jsonfile://{tmp_path / 'ok.json'}") as store:
        assert isinstance(store, JsonFileStore)
    with pytest.raises(StoreError, match=r"no store is registered for the scheme nosuch://.*failed to load: broken"):
        open_store("nosuch://x")


def test_an_unknown_scheme_is_one_line_naming_the_schemes_and_exit_2(harness_cli, tmp_path):
    with pytest.raises(StoreError) as unknown:
        store_exists("mysql://u:pw@db/h")
    assert "mysql://u@db/h" in str(unknown.value) and "pw" not in str(unknown.value)
    assert "postgresql://" in str(unknown.value) and "postgres://" in str(unknown.value)
    for args in (("results", "--store", "nosuch://x"), ("run", "quickstart", "--store", "nosuch://x")):
        code, out, err = harness_cli(*args)
        assert code == 2, err
        assert err.strip().splitlines() == [
            "error: store nosuch://x: no store is registered for the scheme nosuch://; expected the path of an SQLite "
            "file or a URL of postgres://, postgresql://"], err
    assert not list(tmp_path.glob("*.db"))


def test_the_built_in_stores_are_registered_in_setup_cfg_as_the_registry_knows_them():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    declared = dict(line.split(" = ") for line in config["options.entry_points"]["harness.stores"].strip().splitlines())
    assert declared == registry.BUILTIN_STORES


# --------------------------------------------------------------------------- the location
def test_a_location_is_parsed_once_its_scheme_in_any_case_its_password_never_shown(tmp_path):
    url = parse_location("PostgreSQL://harness:s3cret@DB.example:5432/h?sslmode=require")
    assert (url.scheme, url.url) == ("postgresql", True)
    assert url.display == "postgresql://harness@DB.example:5432/h?sslmode=require"
    assert url.target == "postgresql://harness:s3cret@DB.example:5432/h?sslmode=require"
    assert "s3cret" not in repr(url) and url.identity == "postgresql://harness@db.example:5432/h?sslmode=require"
    path = parse_location(str(tmp_path / "x.db"))
    assert (path.scheme, path.url, path.display) == ("sqlite", False, str(tmp_path / "x.db"))
    assert parse_location("x.db").identity == os.path.join(os.getcwd(), "x.db")
    assert redact("--store POSTGRES://u:pw@h/d") == "--store POSTGRES://u@h/d"
    with pytest.raises(StoreError, match="expected the path of an SQLite store file"):
        parse_location("sqlite:///tmp/x.db")


NOT_STORES = [  # (a --store value, a word its refusal says); each would have been taken for a path, or echoed
    (":memory:", "in-memory"), ("file:app.db", "SQLite URI"), ("FILE:app.db?mode=rwc", "SQLite URI"),
    ("host=127.0.0.1 password=SECRET1 dbname=harness", "keyword string"),
    ("dbname=harness password='SECRET2 x'", "keyword string"), ("postgresql:SECRET0@h/db", "without `//`"),
    ("postgresql://u:SECRET3%zz@127.0.0.1/db", "two hex digits"),
    ("POSTGRESQL://u:SECRET4%zz@127.0.0.1/db", "two hex digits"),
    ("postgresql://u:SEC@RET5@127.0.0.1:1/db", "raw '@'"),
]


@pytest.mark.parametrize("value, said", NOT_STORES)
def test_what_is_neither_a_path_nor_a_url_is_refused_as_a_store_without_its_password(tmp_path, monkeypatch,
                                                                                        value, said):
    from click.testing import CliRunner

    from harness.cli import main
    from tests.test_input_refusals import GOOD, _one_line_refusal

    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.db").write_bytes(b"")  # another program's file, which `file:app.db` would have written into
    scenario = tmp_path / "good.yaml"
    scenario.write_text(json.dumps(GOOD), encoding="utf-8")
    for args in (["run", str(scenario)], ["results"], ["report"], ["compare", "--by", "backend"]):
        result = CliRunner().invoke(main, [*args, "--store", value])
        _one_line_refusal(result, "--store", said)
        assert "SECRET" not in result.output and "RET5" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db", "good.yaml"]
    assert (tmp_path / "app.db").read_bytes() == b""


def test_a_drivers_message_quoting_the_url_is_scrubbed_of_the_password_in_every_spelling():
    from psycopg import conninfo

    from harness.results.store import postgres

    location = parse_location("postgresql://u:p%41ss%2Fw@127.0.0.1/db?password=Q%2Fz")
    assert location.display == "postgresql://u@127.0.0.1/db"
    for quoted in ('invalid token: "p%41ss%2Fw"', "password pAss/w was refused", "Q/z", "Q%2Fz"):
        assert postgres._scrub(quoted, location).count("***") == 1, quoted
    # libpq itself quotes the password where it cannot parse it (an invalid %-escape, refused first above)
    raw = "postgresql://u:SECRET3%zz@127.0.0.1/db"
    with pytest.raises(Exception) as libpq:
        conninfo.conninfo_to_dict(raw)
    assert "SECRET3" in str(libpq.value)
    loose = parse_location("postgresql://u:SECRET/6@127.0.0.1/db")  # a `/` cuts libpq's parse in the password
    assert "SECRET/6" not in loose.scrub("failed to resolve host 'u:SECRET/6@127.0.0.1'")
    assert "SECRET" not in loose.display


# --------------------------------------------------------------------------- the protocol
@pytest.mark.parametrize("implementation", [SQLiteStore, PostgresStore, JsonFileStore, Journal])
def test_every_store_implements_every_method_of_the_protocol_with_its_signature(implementation):
    for name in _members(Store):
        assert hasattr(implementation, name) or name in Store.__annotations__, f"{implementation.__name__}.{name}"
        declared = getattr(Store, name, None)
        if callable(declared):
            mine = getattr(implementation, name)
            assert mine is not declared and list(inspect.signature(mine).parameters) == \
                list(inspect.signature(declared).parameters), f"{implementation.__name__}.{name}"


def test_the_journal_implements_the_protocol_itself_not_through_getattr(tmp_path):
    assert "__getattr__" not in vars(Journal)
    assert [name for name in _members(Store) if name not in vars(Journal)] == []
    store = open_store(tmp_path / "j.db")
    journal = Journal(store, StoredSession("s1"))
    assert isinstance(journal, Store) and journal.path == store.path and journal.abandoned is store.abandoned
    journal.begin_session("s1", [planned("k")], scenario_path=None, command="c")
    assert journal.session("s1").entries() == [planned("k")] and journal.find_sessions("s") == ["s1"]
    with journal.reopen() as reader:
        assert type(reader) is SQLiteStore and reader.sessions()[0].state == "running"
    journal.end_session("s1", "finished")
    with journal:
        assert journal.sessions()[0].state == "finished"
    with pytest.raises(StoreError):
        store.sessions()  # closed with the journal

