"""Graph export: an instance graph or an answer's retrieved subgraph as GraphML, and pictures.

The exported graph is a networkx `MultiDiGraph` (several relations may join one pair of
entities). Nodes are the triples' entity names as given (the instance graph's names are already
canonical, `graph.canonical`); edge keys are "e0", "e1", ... in triple order (unique in the
file, valid GraphML identifiers). Every edge carries only values GraphML can store (no None):

  relation    str
  confidence  float, conf_ext in [0, 1]
  source      str (scene, rebel, table, text, kb:conceptnet, ...)
  instance    str, the provenance's instance ("" when none)
  region      str, the provenance's image region as JSON "[x, y, w, h]" ("" when none)
  span        str, the provenance's text span as JSON "[start, end]" ("" when none)
  ref         str, the record's id in its source ("" when none)
  gate        float in [0, 1], the router gate g_p of the triple's slot; only on edges that have
              one (an answer's cited triples: the largest gate over the answer steps). Absent,
              not a sentinel, elsewhere, so no number can be mistaken for a gate.
  cited       bool, the triple is among the answer's cited evidence; on every edge when citations
              are given, else absent

`answer_graph` also sets graph attributes question, answer, mode (str) and supported (bool).
`read_graphml` and `triples_of` read a file back into the same graph and its triples.

Pictures are PNGs drawn with matplotlib's Agg canvas (no display, no pyplot state):
`draw_subgraph` draws the graph with cited triples highlighted and edge width growing with the
gate; `draw_gates` draws the router gates of an answer's cited triples.

Writers refuse a path without the expected suffix (".graphml", ".png"), so a slip cannot replace
a file of another kind, and write atomically (`graphloom_jax.atomic`): a failed write leaves the
previous file in place. Errors name the offending input: TypeError for a value of the wrong kind
(a non-triple, a non-answer), ValueError for a bad value (a gate outside [0, 1], a None
attribute), OSError for a path that cannot be written.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import textwrap
from typing import Any, Iterable, Mapping

import networkx as nx
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Patch

from graphloom_jax import atomic
from graphloom_jax.graph.triples import Provenance, Triple

CITED_COLOR = "#d62728"  # cited evidence
OTHER_COLOR = "#8c8c8c"  # retrieved, not cited (or no citations known)
NODE_COLOR = "#dbe9f6"
ENTITY_SLOT_COLOR = "#1f77b4"
RELATION_SLOT_COLOR = "#ff7f0e"

_GRAPHML_TYPES = (str, bool, int, float)


def _check_triples(triples, where: str) -> list[Triple]:
  if isinstance(triples, (str, bytes, Mapping)) or not isinstance(triples, Iterable):
    raise TypeError(f"{where}: expected an iterable of Triple, got {type(triples).__name__}")
  out = list(triples)
  for i, t in enumerate(out):
    if not isinstance(t, Triple):
      raise TypeError(f"{where}: item {i} is a {type(t).__name__}, not a Triple ({t!r:.80})")
  return out


def _check_gate(gate, where: str) -> float:
  if isinstance(gate, bool) or not isinstance(gate, (int, float)) or not math.isfinite(gate) \
      or not 0.0 <= gate <= 1.0:
    raise ValueError(f"{where}: a gate must be a number in [0, 1], got {gate!r}")
  return float(gate)


def _triple_attrs(t: Triple) -> dict[str, Any]:
  p = t.provenance
  return {"relation": t.relation, "confidence": float(t.confidence), "source": t.source,
          "instance": p.instance,
          "region": json.dumps(list(p.region)) if p.region is not None else "",
          "span": json.dumps(list(p.span)) if p.span is not None else "",
          "ref": p.ref or ""}


def to_networkx(triples: Iterable[Triple], *, gates: Mapping[Triple, float] | None = None,
                cited: Iterable[Triple] | None = None) -> nx.MultiDiGraph:
  """The triples as a GraphML-ready MultiDiGraph (edge attributes: the module docstring).

  Args:
    triples: the edges, in order; equal triples are kept once.
    gates: router gate in [0, 1] per triple (edges of other triples get no `gate`).
    cited: the cited triples; when given, every edge gets `cited` (True for these).
  Every triple named in `gates` or `cited` must be among `triples`.
  """
  triples = list(dict.fromkeys(_check_triples(triples, "to_networkx(triples)")))
  known = set(triples)
  if gates is not None:
    if not isinstance(gates, Mapping):
      raise TypeError(f"to_networkx(gates): expected a mapping Triple -> gate, got "
                      f"{type(gates).__name__}")
    for t, g in gates.items():
      if t not in known:
        raise ValueError(f"to_networkx(gates): {t!r:.120} is not among the triples")
      _check_gate(g, f"to_networkx(gates[{t.verbalize()!r}])")
  if cited is not None:
    cited = set(_check_triples(cited, "to_networkx(cited)"))
    extra = sorted(cited - known, key=Triple.sort_key)
    if extra:
      raise ValueError(f"to_networkx(cited): {extra[0]!r:.120} is not among the triples")
  g = nx.MultiDiGraph()
  for i, t in enumerate(triples):
    attrs = _triple_attrs(t)
    if gates is not None and t in gates:
      attrs["gate"] = float(gates[t])
    if cited is not None:
      attrs["cited"] = t in cited
    g.add_edge(t.subject, t.object, key=f"e{i}", **attrs)
  return g


def _check_answer(answer, where: str) -> None:
  """Duck-typed check for a `pipeline.types.Answer` (importing it would load the pipeline)."""
  missing = [a for a in ("question", "mode", "text", "evidence", "retrieved")
             if not hasattr(answer, a)]
  if missing:
    raise TypeError(f"{where}: expected a pipeline Answer, got {type(answer).__name__} "
                    f"(no {', '.join(missing)})")
  for i, c in enumerate(answer.evidence):
    if not isinstance(getattr(c, "triple", None), Triple) or not hasattr(c, "gate"):
      raise TypeError(f"{where}: evidence[{i}] is a {type(c).__name__}, not a CitedTriple")


def answer_graph(answer) -> nx.MultiDiGraph:
  """The retrieved subgraph of an answer (`Answer.retrieved`, plus any cited triple outside it)
  with the router gate and `cited` = True on the answer's cited triples (`Answer.evidence`) and
  `cited` = False on the rest; graph attributes question, answer, mode and supported."""
  _check_answer(answer, "answer_graph(answer)")
  retrieved = _check_triples(answer.retrieved, "answer_graph(answer.retrieved)")
  gates: dict[Triple, float] = {}
  for i, c in enumerate(answer.evidence):
    g = _check_gate(c.gate, f"answer_graph(answer.evidence[{i}].gate)")
    gates[c.triple] = max(g, gates.get(c.triple, 0.0))
  g = to_networkx(retrieved + list(gates), gates=gates, cited=list(gates))
  g.graph.update(question=str(answer.question), answer=str(answer.text), mode=str(answer.mode),
                 supported=bool(getattr(answer, "supported", True)))
  return g


def _check_attrs(attrs: Mapping, where: str) -> None:
  for name, value in attrs.items():
    if not isinstance(name, str):
      raise ValueError(f"{where}: attribute name {name!r} is not a string")
    if not isinstance(value, _GRAPHML_TYPES) or (isinstance(value, float)
                                                 and not math.isfinite(value)):
      raise ValueError(f"{where}: attribute {name!r} = {value!r:.80} cannot be stored in "
                       "GraphML (expected a str, bool, int or finite float)")


def _from_graph(graph: nx.MultiDiGraph, where: str) -> nx.MultiDiGraph:
  """An exported graph as is (checked), or an instance graph (`graph.instance_graph`, edges
  holding their Triple under "triple") rebuilt from its triples."""
  edges = list(graph.edges(keys=True, data=True))
  holding = [isinstance(d.get("triple"), Triple) for *_, d in edges]
  if edges and all(holding):
    out = to_networkx([d["triple"] for *_, d in edges])
  elif any(holding):
    raise ValueError(f"{where}: some edges hold a Triple under 'triple' and some do not")
  else:
    out = graph
    for u, v, k, d in edges:
      if "relation" not in d:
        raise ValueError(f"{where}: edge ({u!r}, {v!r}, key {k!r}) has no 'relation'")
      _check_attrs(d, f"{where}: edge ({u!r}, {v!r}, key {k!r})")
    for n, d in graph.nodes(data=True):
      if not isinstance(n, str):
        raise ValueError(f"{where}: node {n!r} is not a string")
      _check_attrs(d, f"{where}: node {n!r}")
  attrs = {k: v for k, v in graph.graph.items() if k not in ("node_default", "edge_default")}
  _check_attrs(attrs, f"{where}: graph")
  if out is not graph:
    out.graph.update(attrs)
  return out


def as_graph(graph_or_triples, where: str = "graph") -> nx.MultiDiGraph:
  """The exportable MultiDiGraph of: an exported graph (`to_networkx`, `answer_graph`,
  `read_graphml`), an instance graph (nx graph or `pipeline.instance.InstanceGraph`), a
  `pipeline.types.Answer` (its `answer_graph`) or an iterable of Triple."""
  x = graph_or_triples
  if isinstance(x, nx.Graph):
    if not isinstance(x, nx.MultiDiGraph):
      raise TypeError(f"{where}: expected a networkx MultiDiGraph, got {type(x).__name__}")
    return _from_graph(x, where)
  if isinstance(getattr(x, "graph", None), nx.MultiDiGraph) and hasattr(x, "triples"):
    return _from_graph(x.graph, where)
  if hasattr(x, "retrieved") and hasattr(x, "evidence"):
    return answer_graph(x)
  if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, Iterable):
    raise TypeError(f"{where}: expected a graph, an Answer or triples, got {type(x).__name__}")
  return to_networkx(_check_triples(x, where))


def _target(path, suffix: str, where: str) -> pathlib.Path:
  if not isinstance(path, (str, pathlib.PurePath)) or not str(path).strip():
    raise TypeError(f"{where}: expected a file path, got {path!r}")
  p = pathlib.Path(path).expanduser()
  if p.suffix.lower() != suffix:
    raise ValueError(f"{where}: {p} does not end with {suffix}; refusing to write a {suffix} "
                     "file under another name")
  if p.is_dir():
    raise IsADirectoryError(f"{where}: {p} is a folder, not a file")
  return p


def _save(p: pathlib.Path, write, where: str) -> pathlib.Path:
  """`write(tmp)` into a temporary sibling of p, renamed to p on success."""
  try:
    with atomic.atomic_path(p) as tmp:
      write(tmp)
  except OSError as e:
    raise OSError(e.errno, f"{where}: cannot write {p}: {e.strerror or e}") from e
  return p


def write_graphml(graph_or_triples, path) -> pathlib.Path:
  """Writes an instance graph, an answer's subgraph or triples (anything `as_graph` takes) as
  GraphML to `path` (which must end with .graphml); returns the path."""
  p = _target(path, ".graphml", "write_graphml(path)")
  g = as_graph(graph_or_triples, "write_graphml(graph_or_triples)")
  return _save(p, lambda tmp: nx.write_graphml(g, tmp), "write_graphml")


def read_graphml(path) -> nx.MultiDiGraph:
  """A GraphML file as a MultiDiGraph (a multigraph even when no pair has two edges)."""
  g = nx.read_graphml(path, force_multigraph=True)
  for name in ("node_default", "edge_default"):
    if not g.graph.get(name):
      g.graph.pop(name, None)
  return g


def _edge_order(item: tuple[int, tuple]) -> tuple:
  """Keys "e<i>" by i (the order the triples were exported in), any other key after them."""
  position, (_, _, key, _) = item
  if isinstance(key, str) and key[:1] == "e" and key[1:].isdigit():
    return (0, int(key[1:]))
  return (1, position)


def triples_of(graph: nx.MultiDiGraph) -> list[Triple]:
  """The triples of an exported graph (written by this module or read back), in the order they
  were exported (networkx iterates edges grouped by node, not in insertion order)."""
  out = []
  edges = sorted(enumerate(graph.edges(keys=True, data=True)), key=_edge_order)
  for u, v, k, d in (edge for _, edge in edges):
    try:
      region, span = d.get("region", ""), d.get("span", "")
      out.append(Triple(u, d["relation"], v, d.get("confidence", 1.0), d.get("source", "scene"),
                        Provenance(instance=d.get("instance", ""),
                                   region=tuple(json.loads(region)) if region else None,
                                   span=tuple(json.loads(span)) if span else None,
                                   ref=d.get("ref") or None)))
    except (KeyError, ValueError, TypeError) as e:
      raise ValueError(f"triples_of: edge ({u!r}, {v!r}, key {k!r}) is not an exported triple: "
                       f"{e}") from None
  return out


# --------------------------------------------------------------------------------- pictures

def _wrap(text: str, width: int = 90, lines: int = 3) -> str:
  return "\n".join(textwrap.wrap(" ".join(text.split()), width, max_lines=lines,
                                 placeholder=" ...") or [""])


def _title(g: nx.MultiDiGraph) -> str:
  n = g.number_of_edges()
  counts = f"{n} triple{'s' * (n != 1)}, {g.number_of_nodes()} entities"
  if any("cited" in d for *_, d in g.edges(data=True)):
    counts += f", {sum(bool(d.get('cited')) for *_, d in g.edges(data=True))} cited"
  if "question" in g.graph:
    mode = f" [{g.graph['mode']}]" if g.graph.get("mode") else ""
    return _wrap(f"Q: {g.graph['question']}") + "\n" + _wrap(
        f"A: {g.graph.get('answer', '')!r}{mode}") + f"\n{counts}"
  return counts


def _component_layout(g: nx.Graph, seed: int) -> dict:
  """Positions of one connected component, centred, its larger extent 1 (0 for one node)."""
  nodes = sorted(g.nodes)
  if len(nodes) == 1:
    return {nodes[0]: (0.0, 0.0)}
  if len(nodes) == 2:
    return {nodes[0]: (-0.5, 0.0), nodes[1]: (0.5, 0.0)}
  pos = nx.spring_layout(g, k=2.0 / math.sqrt(len(nodes)), seed=seed, iterations=200)
  xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
  cx, cy = (max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2
  extent = max(max(xs) - min(xs), max(ys) - min(ys)) or 1.0
  return {n: ((x - cx) / extent, (y - cy) / extent) for n, (x, y) in pos.items()}


def _layout(g: nx.MultiDiGraph, seed: int, aspect: float) -> dict:
  """Node positions filling [-aspect, aspect] x [-1, 1] (aspect: the axes' width / height).

  Each connected component is laid out on its own (a seeded spring layout) in a square of side
  sqrt(its node count), and the squares are packed in rows, largest first, so components do not
  push each other to the corners."""
  if g.number_of_nodes() == 0:
    return {}
  simple = nx.Graph(g.to_undirected())
  comps = sorted((sorted(c) for c in nx.connected_components(simple)), key=lambda c: (-len(c), c))
  sides = [math.sqrt(len(c)) for c in comps]
  row_width = max(max(sides), math.sqrt(sum(s * s for s in sides) * aspect))
  pos, x, y, row_height = {}, 0.0, 0.0, 0.0
  for comp, side in zip(comps, sides):
    if x > 0 and x + side > row_width:
      x, y, row_height = 0.0, y - row_height, 0.0
    inner = 0.8 * side if len(comp) > 1 else 0.0
    for n, (px, py) in _component_layout(simple.subgraph(comp), seed).items():
      pos[n] = (x + side / 2 + inner * px, y - side / 2 + inner * py)
    x, row_height = x + side, max(row_height, side)
  out = {n: [0.0, 0.0] for n in pos}
  for axis, scale in ((0, aspect), (1, 1.0)):
    lo = min(xy[axis] for xy in pos.values())
    hi = max(xy[axis] for xy in pos.values())
    for n in pos:
      out[n][axis] = 0.0 if hi == lo else scale * (2.0 * (pos[n][axis] - lo) / (hi - lo) - 1.0)
  return {n: tuple(xy) for n, xy in out.items()}


def _draw_edges(ax, g, pos: dict, boxes: dict) -> None:
  """Every triple of `g` as a labelled arrow between its nodes' boxes (see draw_subgraph)."""
  groups: dict[tuple, list] = {}
  for u, v, k, d in g.edges(keys=True, data=True):
    groups.setdefault(tuple(sorted((u, v))), []).append((u, v, k, d))
  for (a, b), edges in groups.items():
    for i, (u, v, k, d) in enumerate(edges):
      gate = d.get("gate")
      cited = bool(d.get("cited"))
      color = CITED_COLOR if cited else OTHER_COLOR
      width = 1.0 + 5.0 * min(max(float(gate), 0.0), 1.0) if gate is not None else 1.0
      label = str(d.get("relation", k)) + (f" ({float(gate):.2f})" if gate is not None else "")
      text_kw = dict(fontsize=8, ha="center", va="center", color="#8b0000" if cited else "#333",
                     zorder=4, bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none",
                                         alpha=0.85))
      if u == v:  # a self-loop: an arc above the node, out of its box and back in
        x, y = pos[u]
        h = 0.2 * (1 + i)
        ax.add_patch(FancyArrowPatch((x - 0.08, y), (x + 0.08, y),
                                     connectionstyle=f"arc3,rad={-h / 0.08}", arrowstyle="-|>",
                                     mutation_scale=12, color=color, lw=width, zorder=2))
        ax.text(x, y + h, label, **text_kw)
        continue
      m = len(edges)
      rad = 0.0 if m == 1 else 0.27 * (2 * i / (m - 1) - 1)  # spread over [-0.27, 0.27]
      if (u, v) != (a, b):
        rad = -rad  # arc3 bends relative to the arrow's direction
      (x1, y1), (x2, y2) = pos[u], pos[v]
      ax.add_patch(FancyArrowPatch((x1, y1), (x2, y2), connectionstyle=f"arc3,rad={rad}",
                                   arrowstyle="-|>", mutation_scale=14, color=color, lw=width,
                                   shrinkA=2, shrinkB=2, zorder=2,
                                   patchA=boxes[u].get_bbox_patch(),
                                   patchB=boxes[v].get_bbox_patch()))
      # The midpoint of arc3's quadratic Bezier (equal aspect: data and display agree).
      dx, dy = x2 - x1, y2 - y1
      ax.text((x1 + x2) / 2 + 0.5 * rad * dy, (y1 + y2) / 2 - 0.5 * rad * dx, label, **text_kw)


def draw_subgraph(graph, path, *, title: str | None = None, seed: int = 0) -> pathlib.Path:
  """Draws a graph (anything `as_graph` takes) to a PNG at `path` (which must end with .png).

  Nodes are entity boxes placed by a seeded spring layout (same graph, same picture); every
  triple is an arrow subject -> object labelled with its relation (and gate, when it has one),
  parallel edges bent apart. Cited triples are red, the rest grey; an edge with a gate g is
  1 + 5 g points wide, one without a gate 1 point. The title (default: the question, the answer
  and the counts for an answer's subgraph, else the counts) is drawn inside the figure.
  Returns the path."""
  p = _target(path, ".png", "draw_subgraph(path)")
  g = as_graph(graph, "draw_subgraph(graph)")
  n = g.number_of_nodes()
  size = min(6.0 + 0.3 * n, 14.0)
  fig = Figure(figsize=(size * 1.3, size), dpi=110)
  FigureCanvasAgg(fig)
  box = (0.02, 0.02, 0.96, 0.86)
  ax = fig.add_axes(box)
  pos = _layout(g, seed, aspect=1.3 * box[2] / box[3])
  ax.set_axis_off()
  ax.set_aspect("equal")
  boxes = {}
  for node, (x, y) in pos.items():
    boxes[node] = ax.text(x, y, _wrap(str(node), 20, 2), ha="center", va="center", fontsize=10,
                          zorder=3, bbox=dict(boxstyle="round,pad=0.35", fc=NODE_COLOR,
                                              ec="#4a6f8a", lw=1.0))
  _draw_edges(ax, g, pos, boxes)
  if pos:
    xs, ys = [x for x, _ in pos.values()], [y for _, y in pos.values()]
    loops = any(u == v for u, v in g.edges())
    ax.set_xlim(min(xs) - 0.3, max(xs) + 0.3)  # room for wide names
    ax.set_ylim(min(ys) - 0.12, max(ys) + 0.12 + 0.2 * loops)
  else:
    ax.text(0.5, 0.5, "no triples", ha="center", va="center", fontsize=14,
            transform=ax.transAxes)
  if any("cited" in d for *_, d in g.edges(data=True)):
    ax.legend(handles=[Line2D([], [], color=CITED_COLOR, lw=3, label="cited (width ~ gate)"),
                       Line2D([], [], color=OTHER_COLOR, lw=1, label="retrieved, not cited")],
              loc="lower right", fontsize=9, framealpha=0.9)
  fig.suptitle(title if title is not None else _title(g), fontsize=11, y=0.98, va="top")
  fig.canvas.draw()  # places the node boxes, so the second draw clips the arrows at them
  return _save(p, lambda tmp: fig.savefig(tmp, format="png"), "draw_subgraph")


def draw_gates(answer, path, *, title: str | None = None) -> pathlib.Path:
  """Draws the router gates of an answer's cited triples to a PNG at `path` (ending .png).

  An `Answer` records, per cited triple, only the largest gate g_p of its slot over the answer
  steps (`CitedTriple.gate`), not the gates at each step, so this is a bar chart of those gates
  (one bar per cited triple, best first, coloured by the slot that carried it: entity or
  relation), not a heat map over the answer tokens. An answer without cited triples (the text
  modes, or no slot routed) gets a figure saying so. Returns the path."""
  p = _target(path, ".png", "draw_gates(path)")
  _check_answer(answer, "draw_gates(answer)")
  cited = list(answer.evidence)
  gates = [_check_gate(c.gate, f"draw_gates(answer.evidence[{i}].gate)")
           for i, c in enumerate(cited)]
  rows = len(cited)
  fig = Figure(figsize=(10.0, min(2.8 + 0.38 * rows, 14.0)), dpi=110)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  if rows:
    labels = [_wrap(f"{c.triple.verbalize()}  [{c.triple.source}]", 60, 1) for c in cited]
    colors = [ENTITY_SLOT_COLOR if getattr(c, "slot", "") == "entity" else RELATION_SLOT_COLOR
              for c in cited]
    y = range(rows)
    ax.barh(y, gates, color=colors, height=0.7)
    for yi, gi in zip(y, gates):
      inside = gi > 0.9
      ax.text(gi - 0.01 if inside else gi + 0.01, yi, f"{gi:.2f}", va="center", fontsize=8,
              ha="right" if inside else "left", color="white" if inside else "black")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("router gate g_p (largest over the answer steps)")
    ax.legend(handles=[Patch(color=ENTITY_SLOT_COLOR, label="entity slot"),
                       Patch(color=RELATION_SLOT_COLOR, label="relation slot")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
  else:
    ax.set_axis_off()
    ax.text(0.5, 0.5, f"no cited triples (mode {answer.mode}): nothing was routed",
            ha="center", va="center", fontsize=12, transform=ax.transAxes)
  head = _wrap(f"Router gates of the cited triples. Q: {answer.question}") + "\n" + _wrap(
      f"A: {answer.text!r} [{answer.mode}]")
  ax.set_title(title if title is not None else head, fontsize=10, loc="left")
  fig.tight_layout()
  return _save(p, lambda tmp: fig.savefig(tmp, format="png"), "draw_gates")


def write_explanations(answers, names, directory) -> int:
  """Per answer, under `directory`: <name>.graphml (`answer_graph`),
  <name>_subgraph.png and <name>_gates.png; a name is reduced to [A-Za-z0-9._-] (duplicates get
  "_<index>"). Returns how many answers were written."""
  directory = pathlib.Path(directory)
  used = set()
  for i, (answer, name) in enumerate(zip(answers, names, strict=True)):
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._") or str(i)
    if stem in used:
      stem = f"{stem}_{i}"
    used.add(stem)
    graph = answer_graph(answer)
    write_graphml(graph, directory / f"{stem}.graphml")
    draw_subgraph(graph, directory / f"{stem}_subgraph.png")
    draw_gates(answer, directory / f"{stem}_gates.png")
  return len(answers)
