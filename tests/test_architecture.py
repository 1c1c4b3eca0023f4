"""The layout's rules, read from the code's imports: no cycle, harness layers in data-flow order, no name branches.

Every ``import`` and ``from ... import`` in ``harness/``, ``impls/``, ``benchmarks/`` and
``examples/`` counts, at module level or inside a function (a lazy import is still a
dependency). Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``, so those
count too, except a module's own enclosing packages (already being imported).
"""

import ast
from pathlib import Path

from impls import registry

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("harness", "impls", "benchmarks", "examples")
#: harness's subpackages, lowest first: each may import only those before it (README, "Layout").
LAYERS = ("corpus", "judge", "kinds", "report", "run", "records", "show", "conformance", "cli", "__main__")


def _modules() -> dict:
    mods = {}
    for top in TOPS:
        for p in (ROOT / top).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if top == "examples":   # an example package is imported by its own name, not examples.<...>
                src = [i for i, x in enumerate(parts) if x == "src"]
                parts = parts[src[0] + 1:] if src else parts[2:]
                if not parts:
                    continue
            is_pkg = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return mods


def _graph(mods: dict) -> dict:
    graph = {m: set() for m in mods}
    for m, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
            for t in targets:
                parts = t.split(".")
                for i in range(1, len(parts) + 1):
                    pre = ".".join(parts[:i])
                    if pre in mods and pre != m and not m.startswith(pre + "."):
                        graph[m].add(pre)
    return graph


def _cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    graph = _graph(_modules())
    assert len(graph) > 80
    assert _cycles(graph) == []


def _layer(mod: str):
    parts = mod.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 else None


def test_harness_layers_import_only_lower_layers():
    graph = _graph(_modules())
    bad = []
    for m, deps in graph.items():
        if m.split(".")[0] != "harness" or _layer(m) is None:
            continue
        me = LAYERS.index(_layer(m))
        for d in deps:
            if d.split(".")[0] == "harness" and _layer(d) is not None and LAYERS.index(_layer(d)) > me:
                bad.append(f"{m} imports {d}")
    assert not bad, "\n".join(sorted(bad))


def test_impls_import_no_harness_and_the_harness_no_benchmarks():
    graph = _graph(_modules())
    bad = [f"{m} imports {d}" for m, deps in graph.items() for d in deps
           if (m.startswith("impls") and d.split(".")[0] in ("harness", "benchmarks"))
           or (m.startswith("harness") and d.split(".")[0] == "benchmarks")]
    assert not bad, bad


def _string_constants(node) -> list:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _string_constants(e)]
    return []


def _name_branches(source: str, names: set) -> list:
    """``(line, name)`` of each comparison with, or ``startswith``/``endswith`` of, a registered name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                found += [(node.lineno, s) for s in _string_constants(side) if s in names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")):
            found += [(node.lineno, s) for a in node.args for s in _string_constants(a)
                      if s.strip("-") and any(n.startswith(s) or n.endswith(s) for n in names)]
    return found


def test_the_name_branch_finder_finds_branches():
    src = "if impl == 'vllm':\n    pass\nok = name in ('a', 'fused')\nx = n.startswith('reference-')\ny = 'vllm'\n"
    assert _name_branches(src, {"vllm", "fused", "reference-hf"}) == [(1, "vllm"), (3, "fused"), (4, "reference-")]


def test_no_branch_on_an_implementations_name_outside_its_package():
    """``impl == "vllm"``, ``name in ("fused", ...)`` or ``name.startswith("reference-")`` in the harness or the
    benchmarks' shared modules would make an engine's difference a branch instead of a profile field or a
    declaration of the implementation."""
    names = set(registry.names())
    paths = list((ROOT / "harness").rglob("*.py")) + [ROOT / "benchmarks" / "latency.py",
                                                      ROOT / "benchmarks" / "test_latency.py"]
    bad = [f"{path.relative_to(ROOT)}:{line}: {name!r}" for path in paths
           for line, name in _name_branches(path.read_text(encoding="utf-8"), names)]
    assert not bad, "\n".join(bad)
