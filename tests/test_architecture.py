"""The package's import graph, read from the sources with `ast` and counting imports made
inside functions: it has no cycle, and no module of graphloom_jax imports the repository's
launchers, configs or benchmarks (the library carries its own defaults)."""

import ast
import pathlib

import networkx as nx

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "graphloom_jax"


def _modules() -> dict[str, pathlib.Path]:
  return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
          for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: pathlib.Path, modules) -> set[str]:
  """Modules `name` imports. `from pkg import sub` is an edge to pkg.sub alone when every
  imported name is a submodule, else to pkg (its __init__) as well."""
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  out = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      out |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
      else:
        base = node.module or ""
      subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
      out |= subs if len(subs) == len(node.names) else subs | {base}
  return out


def _graph():
  modules = _modules()
  g = nx.DiGraph()
  outside = []
  for name, path in modules.items():
    g.add_node(name)
    for target in _imports(name, path, modules):
      if (target.split(".")[0] in ("launch", "configs", "benchmarks")
          or target.startswith(("graphloom_jax.launch", "graphloom_jax.configs"))):
        outside.append(f"{name} imports {target}")
      if target in modules and target != name:
        g.add_edge(name, target)
  return g, outside


def test_no_import_cycles():
  g, _ = _graph()
  assert g.number_of_nodes() > 50
  cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
  assert not cycles, cycles


def test_the_library_imports_no_launcher_config_or_benchmark():
  _, outside = _graph()
  assert not outside, outside


def test_the_graph_sees_function_level_imports():
  # pipeline.graphloom imports pipeline.decode at module level; a function-level import
  # elsewhere (e.g. data.beam_graphs -> data.scenekb) must be an edge too.
  g, _ = _graph()
  assert g.has_edge("graphloom_jax.pipeline.graphloom", "graphloom_jax.pipeline.decode")
  assert g.has_edge("graphloom_jax.data.beam_graphs", "graphloom_jax.data.scenekb")


def test_tests_import_no_launcher_or_benchmark():
  """Tests exercise the library: a launcher or benchmark script is run (as a program), never
  imported, so the code a test checks lives in graphloom_jax."""
  scripts = {p.stem for folder in ("launch", "benchmarks") for p in (ROOT / folder).rglob("*.py")}
  found = []
  for path in sorted((ROOT / "tests").glob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
               [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
      found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                if n.split(".")[0] in ("launch", "benchmarks")
                or n.startswith("graphloom_jax.launch")
                or n in scripts]  # a script imported by name through sys.path
      if isinstance(node, ast.ImportFrom) and node.module == "graphloom_jax":
        found += [f"{path.name}:{node.lineno} imports graphloom_jax.launch"
                  for a in node.names if a.name == "launch"]
  assert not found, found
