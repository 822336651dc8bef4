"""The shape of the code: layers without import cycles, imports at module top, and modules, classes and functions
a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The size limits hold for the product's code: every .py file under harness/, backends/ and plugins/ (the plugins'
# packages), except those under a tests/ or benchmarks/ folder (tests, and benchmark scripts run by hand, read
# top to bottom as scripts and are imported by nothing in the product). Lines are counted as they are in the file,
# docstrings, comments and blank lines included.
#: The longest module allowed.
MAX_MODULE_LINES = 400
#: The longest class allowed (its methods and nested classes count inside it).
MAX_CLASS_LINES = 200
#: The longest function allowed (nested functions count inside theirs).
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _harness_imports(tree: ast.Module) -> list[tuple[ast.stmt, list[str]]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.append((node, [a.name for a in node.names if a.name.startswith("harness")]))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness"):
            found.append((node, [f"{node.module}.{a.name}" for a in node.names]))
    return [(node, names) for node, names in found if names]


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, targets in _harness_imports(ast.parse(path.read_text(encoding="utf-8"))):
            for target in targets:
                module = _resolve(target, modules)
                if module and module not in (name, "harness"):
                    graph[name].add(module)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


#: harness's layers, lowest first (docs/architecture.md draws them): a module imports only from its own layer
#: or one below it, at module top, deferred inside a function, or under TYPE_CHECKING alike. The first two are
#: modules (harness/errors.py, harness/fields.py), the others packages; `cli` and `__main__` are the top. The
#: package's own __init__ (the public API: harness.load_results) is the one module above every layer.
LAYERS = ("errors", "fields", "machine", "timing", "workloads", "seam", "scenario", "results", "worker", "session",
          "present", "commands", "cli", "__main__")


def _layer(module: str) -> int | None:
    """The index in LAYERS of a module `harness.X...` (None for the package root, harness/__init__.py)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else None


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a layer above its own, as 'importer -> imported'."""
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if _layer(source) is not None and _layer(target) is not None and _layer(target) > _layer(source))


def test_every_module_of_harness_belongs_to_a_layer():
    assert sorted({name.split(".")[1] for name in _modules() if "." in name} - set(LAYERS)) == []


def test_no_layer_imports_one_above_it():
    assert _upward_imports(_import_graph()) == []


def test_the_layer_check_finds_an_import_from_above():
    graph = {"harness.seam.backend": {"harness.worker.execute", "harness.timing.loop"},
             "harness.worker.execute": {"harness.seam.backend"}, "harness": {"harness.commands.run"}}
    assert _upward_imports(graph) == ["harness.seam.backend -> harness.worker.execute"]


def test_no_import_cycle_inside_harness():
    assert _cycles(_import_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _deferred_imports(tree: ast.Module, lines: list[str]) -> list[tuple[int, str]]:
    """harness imports inside functions or classes whose line (or the line above) carries no comment saying why."""
    top = {id(node) for node in tree.body}
    bad = []
    for node, _ in _harness_imports(tree):
        if id(node) in top or isinstance(node, ast.ImportFrom) and _under_type_checking(tree, node):
            continue
        said = "#" in lines[node.lineno - 1] or "#" in lines[node.lineno - 2]
        if not said:
            bad.append((node.lineno, lines[node.lineno - 1].strip()))
    return bad


def _under_type_checking(tree: ast.Module, target: ast.stmt) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            if any(child is target for child in ast.walk(node)):
                return True
    return False


def test_harness_imports_sit_at_module_top_unless_a_comment_says_why():
    bad = {}
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        found = _deferred_imports(ast.parse(text), text.splitlines())
        if found:
            bad[name] = found
    assert bad == {}


def _long_definitions(path: Path, kinds: tuple[type, ...], most: int) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every definition of these kinds in a file longer than `most` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.end_lineno - node.lineno + 1 > most]


def _long_functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function in a file longer than MAX_FUNCTION_LINES."""
    return _long_definitions(path, (ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES)


def _long_classes(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every class in a file longer than MAX_CLASS_LINES."""
    return _long_definitions(path, (ast.ClassDef,), MAX_CLASS_LINES)


def _long_modules(paths: list[Path]) -> list[tuple[Path, int]]:
    """(path, lines) of every module longer than MAX_MODULE_LINES, its lines numbered as an editor numbers them."""
    counted = [(path, len(path.read_text(encoding="utf-8").splitlines())) for path in paths]
    return [(path, lines) for path, lines in counted if lines > MAX_MODULE_LINES]


def _product_sources() -> list[Path]:
    paths = [*(ROOT / "harness").rglob("*.py"), *(ROOT / "backends").rglob("*.py"),
             *(ROOT / "plugins").rglob("*.py")]
    return sorted(p for p in paths if "tests" not in p.relative_to(ROOT).parts
                  and "benchmarks" not in p.relative_to(ROOT).parts)


def test_no_function_is_longer_than_a_screen():
    long = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
            for path in _product_sources() for name, line, length in _long_functions(path)]
    assert long == []


def test_the_length_check_counts_a_nested_function_inside_its_own(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = tmp_path / "long.py"
    source.write_text(f"def outer():\n    def inner():\n{body}\n    return inner\n", encoding="utf-8")
    found = {name: length for name, _, length in _long_functions(source)}
    assert found == {"outer": MAX_FUNCTION_LINES + 3, "inner": MAX_FUNCTION_LINES + 1}


def test_no_class_is_longer_than_two_screens():
    long = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
            for path in _product_sources() for name, line, length in _long_classes(path)]
    assert long == []


def test_the_class_check_counts_the_methods_and_a_nested_class_inside_their_class(tmp_path):
    body = "\n".join(f"            x{i} = {i}" for i in range(MAX_CLASS_LINES))
    source = tmp_path / "long.py"
    source.write_text(f"class Outer:\n    class Inner:\n        def method(self):\n{body}\n\n\nclass Short:\n"
                      "    pass\n", encoding="utf-8")
    found = {name: length for name, _, length in _long_classes(source)}
    assert found == {"Outer": MAX_CLASS_LINES + 3, "Inner": MAX_CLASS_LINES + 2}


def test_the_architecture_page_names_todays_largest_module_and_class():
    """docs/architecture.md's sentence on the largest module and class is true of the tree."""
    sources = _product_sources()
    module = max(sources, key=lambda path: len(path.read_text(encoding="utf-8").splitlines()))
    module_lines = len(module.read_text(encoding="utf-8").splitlines())
    classes = [(node.end_lineno - node.lineno + 1, node.name, path) for path in sources
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)]
    class_lines, class_name, class_path = max(classes, key=lambda found: found[0])
    page = " ".join((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    assert (f"Today the largest module is {module.relative_to(ROOT)} ({module_lines} lines) and the largest class is "
            f"`{class_name}` in {class_path.relative_to(ROOT)} ({class_lines} lines)") in page


def test_no_module_is_longer_than_its_limit():
    assert [f"{path.relative_to(ROOT)} ({lines} lines)" for path, lines in _long_modules(_product_sources())] == []


def test_the_module_check_finds_a_module_one_line_too_long(tmp_path):
    at_limit, over = tmp_path / "at_limit.py", tmp_path / "over.py"
    at_limit.write_text("".join(f"x{i} = {i}\n" for i in range(MAX_MODULE_LINES)), encoding="utf-8")
    over.write_text(at_limit.read_text(encoding="utf-8") + "# one line more, a comment: it counts too\n",
                    encoding="utf-8")
    assert _long_modules([at_limit, over]) == [(over, MAX_MODULE_LINES + 1)]


def test_the_size_checks_look_at_every_package_but_not_at_tests_or_benchmarks():
    sources = {str(path.relative_to(ROOT)) for path in _product_sources()}
    assert {"harness/session/runner.py", "backends/torch/device.py",
            "plugins/harness-jax/harness_jax/device.py"} <= sources
    assert not any("/tests/" in f"/{name}" or "/benchmarks/" in f"/{name}" for name in sources)


@pytest.mark.parametrize("package", [layer for layer in LAYERS if (ROOT / "harness" / layer).is_dir()])
def test_each_layer_is_a_package_with_a_docstring(package):
    init = ROOT / "harness" / package / "__init__.py"
    assert init.is_file() and ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))


def test_the_example_workload_plugin_needs_no_line_in_the_core_or_the_bundled_backends():
    """plugins/harness-mlp brings a model from outside: harness/ and backends/ never name it (docs/architecture.md,
    "Bring your own model")."""
    named = [f"{path.relative_to(ROOT)}:{i}" for path in [*(ROOT / "harness").rglob("*.py"), *(ROOT / "backends").rglob("*.py")]
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "harness_mlp" in line or "mlp_train" in line]
    assert named == []


#: The most `.get(` calls harness/ may hold: inside, what the layers hand each other is typed, and a dict is read
#: only where data enters or leaves (docs/architecture.md, "Typed inside", says what the rest are).
MAX_GET_CALLS = 150


def _get_calls(paths: list[Path]) -> int:
    """How many calls of a method named `get` (`mapping.get(key)`, `os.environ.get(name)`) these files make."""
    return sum(1 for path in paths for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get")


def test_dicts_are_read_with_get_only_at_the_edges():
    found = _get_calls(sorted((ROOT / "harness").rglob("*.py")))
    assert found < MAX_GET_CALLS, (f"{found} `.get(` calls in harness/: a dict read inside the layers wants a typed "
                                   "object (docs/architecture.md, Typed inside)")


def test_the_get_count_counts_method_calls_named_get_and_nothing_else(tmp_path):
    source = tmp_path / "gets.py"
    source.write_text("import os\nrow = {}\nrow.get('a')\nos.environ.get('B', '')\nrow['get']\nget = row.get\n"
                      "getattr(row, 'get')\nrow.getall('c')\n", encoding="utf-8")
    assert _get_calls([source]) == 2
