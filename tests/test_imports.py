"""No import circles: modules of rubric_jax and evals form a graph without cycles, counting imports inside
functions and under TYPE_CHECKING too (a lazy import only hides a circle until the call)."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_graph(packages=("rubric_jax", "evals")) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file. `from pkg import sub` counts as an import
    of the submodule only (not of the package's __init__) when sub is a module."""
    mods = {}
    for pkg in packages:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
                    mods[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
    graph = {}
    for name, path in mods.items():
        deps = set()
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [a.name for a in node.names if f"{node.module}.{a.name}" in mods]
                deps.update(f"{node.module}.{s}" for s in subs)
                if node.module in mods and len(subs) < len(node.names):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def test_the_finder_finds_a_circle_through_a_lazy_import():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    graph = import_graph()
    assert len(graph) > 100 and "rubric_jax.rl.trainer" in graph["rubric_jax.main"] | {
        d for m in graph["rubric_jax.main"] for d in graph[m]}  # the graph is read, not empty
    assert cycles(graph) == []


def shadowed_names(packages=("rubric_jax", "evals")) -> list[str]:
    """`pkg.name` for every name a package's __init__ binds by importing it from elsewhere while the package
    also has a submodule of that name: the first import of the submodule (a lazy one, deep in a call)
    replaces the package's attribute with the module, so the name works until then and fails after."""
    out = []
    for pkg in packages:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            if "__init__.py" not in files:
                continue
            package = os.path.relpath(dirpath, ROOT).replace(os.sep, ".")
            subs = {f[:-3] for f in files if f.endswith(".py")} | {
                d for d in os.listdir(dirpath) if os.path.isfile(os.path.join(dirpath, d, "__init__.py"))}
            with open(os.path.join(dirpath, "__init__.py"), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module != package and node.level == 0:
                    out += [f"{package}.{a.asname or a.name}" for a in node.names
                            if (a.asname or a.name) in subs and f"{node.module}.{a.name}" != f"{package}.{a.name}"]
    return out


def test_the_finder_finds_a_name_shadowed_by_its_submodule(tmp_path, monkeypatch):
    pkg = tmp_path / "demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from demo.engine import pairwise\nfrom demo import helpers\n")
    for name in ("engine", "pairwise", "helpers"):
        (pkg / f"{name}.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    assert shadowed_names(("demo",)) == ["demo.pairwise"]


def test_no_public_name_is_shadowed_by_a_submodule():
    """rubric_jax.judge.pairwise (docs/judge.md's function) was replaced by its submodule judge/pairwise.py on the
    engine's first lazy import of it: the documented block's second call raised 'module' object is not callable."""
    assert shadowed_names() == []


METHOD_WORDS = {"rare", "rlmr", "pacing", "listwise", "pairwise", "absolute"}


def method_naming_lines(folder) -> list[str]:
    """"file:line" of every code line in `folder`'s modules with an identifier one of whose words (split at "_" and
    case changes) names a method or one of its modes (METHOD_WORDS); comments and strings aside."""
    import io
    import re
    import tokenize

    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            tokens = tokenize.generate_tokens(io.StringIO(fh.read()).readline)
            lines = {t.start[0] for t in tokens if t.type == tokenize.NAME and METHOD_WORDS & {
                w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", t.string)}}
        out += [f"{name}:{n}" for n in sorted(lines)]
    return out


def test_the_method_finder_finds_a_method_in_code_not_in_comments(tmp_path):
    (tmp_path / "a.py").write_text('x = 1  # the pairwise judge\ny = "rare"\nuse_listwise = True\nRlmrConfig = 2\n')
    assert method_naming_lines(str(tmp_path)) == ["a.py:3", "a.py:4"]


def test_rl_reaches_methods_only_through_the_plugin_registry():
    """No code line of rubric_jax/rl/ names a method (rl.plugins finds them by name) and no module of rl/ imports
    rubric_jax.methods: the built-in methods are a plugin like any other."""
    rl = os.path.join(ROOT, "rubric_jax", "rl")
    assert method_naming_lines(rl) == []
    graph = import_graph()
    assert len([m for m in graph if m.startswith("rubric_jax.rl.")]) > 15  # the graph is read
    assert {m: sorted(d for d in deps if d.startswith("rubric_jax.methods"))
            for m, deps in graph.items() if m.startswith("rubric_jax.rl.") and any(
                d.startswith("rubric_jax.methods") for d in deps)} == {}
