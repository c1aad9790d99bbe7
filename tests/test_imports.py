"""The package's import structure, read with `ast` (nothing is imported).

Nodes are tf_msemb's sub-packages (data, models, training, ...) and its
top-level modules (config, train, ...); an edge A -> B means some module of A
imports from B, at module level or inside a function.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tf_msemb"
ROOT = PACKAGE.name


def _modules():
    """`(dotted name, parsed tree)` of every module under tf_msemb/."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _node(dotted):
    """The sub-package or top-level module a dotted tf_msemb name belongs to."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _imported(module, path, tree):
    """Dotted tf_msemb names `module` imports (for `from X import y`, `X.y`)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph():
    graph = {}
    for module, path, tree in _modules():
        source = _node(module)
        edges = graph.setdefault(source, set())
        for name in _imported(module, path, tree):
            if name.split(".")[0] == ROOT:
                target = _node(name)
                if not ((PACKAGE / target).is_dir() or (PACKAGE / f"{target}.py").exists()):
                    target = ROOT  # `from tf_msemb import x` where x lives in tf_msemb/__init__.py
                if target != source:
                    edges.add(target)
    return graph


def find_cycle(graph):
    """One cycle as a list of nodes `[a, b, ..., a]`, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def test_find_cycle_reports_the_path():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_the_known_edges():
    graph = import_graph()
    assert {"data", "models", "objectives", "training", "text", "config", "train"} <= graph.keys()
    assert "training" in graph["train"] and "configurables" in graph["config"]


def test_no_import_cycle_between_sub_packages():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_library_module_queries_gin():
    """Library code takes its settings as arguments; only gin itself reads the bindings."""
    calls = []
    for module, path, tree in _modules():
        for node in ast.walk(tree):
            named = isinstance(node, ast.ImportFrom) and any(a.name == "query_parameter" for a in node.names)
            if named or isinstance(node, ast.Attribute) and node.attr == "query_parameter":
                calls.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not calls, "gin.query_parameter in " + ", ".join(calls)


def test_only_the_pipelines_import_apache_beam():
    """The `beam` extra is optional: no module outside tf_msemb/pipelines imports it, even inside a function."""
    importers = {module for module, path, tree in _modules()
                 if any(name.split(".")[0] == "apache_beam" for name in _imported(module, path, tree))}
    assert importers and all(_node(module) == "pipelines" for module in importers), sorted(importers)


def test_inference_only_code_sits_above_the_models_and_below_the_export():
    """models/, objectives/ and training/ hold what training runs; inference/ builds on models/ and only the export
    (and what configures it) imports it; the CPU rules (`cpus`) sit below them all, for training to read too."""
    graph = import_graph()
    assert graph["inference"] <= {"models", "text", "text_files", "cpus"}, graph["inference"]
    assert graph["cpus"] == set(), graph["cpus"]
    importers = {node for node, targets in graph.items() if "inference" in targets}
    assert importers == {"export", "configurables"}, importers


def test_only_the_mteb_modules_import_mteb():
    importers = {module for module, path, tree in _modules()
                 if any(name.split(".")[0] == "mteb" for name in _imported(module, path, tree))}
    assert importers and all(module.startswith("tf_msemb.evaluation.mteb.") for module in importers), sorted(importers)


def test_the_export_metadata_file_is_named_in_one_place():
    """Readers import `export.model_card.METADATA_FILE` instead of spelling the name again."""
    spelled = [str(path.relative_to(PACKAGE.parent)) for module, path, tree in _modules()
               for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and node.value == "tf_msemb_export.json"]
    assert spelled == ["tf_msemb/export/model_card.py"], spelled
