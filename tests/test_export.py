"""Graph export (`graph.export`): GraphML that reads back with every attribute equal, parallel
relations kept, an answer's subgraph with its gates and citations, PNG pictures, and errors that
name the bad input. No model runs: the triples and the Answer are built by hand."""

import math
import os
import pathlib
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from matplotlib import image as mpimg

from graphloom_jax.graph import export
from graphloom_jax.graph.instance_graph import build_instance_graph, graph_triples
from graphloom_jax.graph.triples import Provenance, Triple
from graphloom_jax.pipeline.types import Answer, CitedTriple, Claim

ROOT = pathlib.Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TRIPLES = [
    Triple("horse", "in front of", "fence", 0.9, "scene",
           Provenance("img1", region=(10, 20.5, 30, 40), ref="relationship 1")),
    Triple("horse", "near", "fence", 0.75, "scene", Provenance("img1")),
    Triple("fence", "behind", "horse", 0.6, "rebel", Provenance("img1", span=(3, 9))),
    Triple("horse", "is a", "animal", 1.0, "kb:wordnet", Provenance("img1", ref="wordnet:n1")),
    Triple("man", "riding", "horse", 0.8, "scene", Provenance("img1")),
    Triple("fence", "made of", "wood", 0.65, "text", Provenance("doc2", span=(0, 4))),
]
EXTRA = Triple("sky", "above", "tree", 0.5, "scene", Provenance("img1"))


def _answer(evidence=((0, 0.93, "relation"), (1, 0.41, "entity")), mode="graphloom"):
  return Answer("What is the horse in front of?", mode, "the fence",
                evidence=[CitedTriple(TRIPLES[i], g, slot, 0.5) for i, g, slot in evidence],
                claims=[Claim("the horse is in front of the fence", 0.9, True)],
                retrieved=list(TRIPLES))


def _edges(g):
  return sorted((u, v, k, tuple(sorted(d.items()))) for u, v, k, d in g.edges(keys=True, data=True))


def _red_pixels(path) -> int:
  """Pixels within a few levels of export.CITED_COLOR."""
  rgb = mpimg.imread(path)[..., :3]
  target = np.array([0xd6, 0x27, 0x28]) / 255.0
  return int(np.sum(np.all(np.abs(rgb - target) < 0.03, axis=-1)))


def _check_png(path):
  data = pathlib.Path(path).read_bytes()
  assert data[:8] == PNG_MAGIC and len(data) > 2000
  img = mpimg.imread(path)
  assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200
  return img


def test_graphml_round_trip_keeps_every_attribute(tmp_path):
  gates = {TRIPLES[0]: 0.93, TRIPLES[3]: 0.125}
  g = export.to_networkx(TRIPLES, gates=gates, cited=[TRIPLES[0], TRIPLES[1]])
  path = export.write_graphml(g, tmp_path / "g.graphml")
  for back in (export.read_graphml(path), nx.read_graphml(path, force_multigraph=True)):
    assert isinstance(back, nx.MultiDiGraph)
    assert _edges(back) == _edges(g)
  back = export.read_graphml(path)
  assert export.triples_of(back) == TRIPLES
  d = {k: d for _, _, k, d in back.edges(keys=True, data=True)}
  assert d["e0"]["gate"] == 0.93 and d["e3"]["gate"] == 0.125
  assert "gate" not in d["e1"]  # no gate: absent, not a sentinel
  assert [d[f"e{i}"]["cited"] for i in range(6)] == [True, True, False, False, False, False]
  assert d["e0"]["confidence"] == 0.9 and isinstance(d["e3"]["confidence"], float)
  assert (d["e0"]["source"], d["e3"]["source"]) == ("scene", "kb:wordnet")
  assert (d["e0"]["region"], d["e0"]["ref"], d["e0"]["span"]) == ("[10, 20.5, 30, 40]",
                                                                   "relationship 1", "")
  assert (d["e2"]["span"], d["e5"]["instance"]) == ("[3, 9]", "doc2")
  # without gates and citations the edges carry neither
  plain = export.read_graphml(export.write_graphml(TRIPLES, tmp_path / "plain.graphml"))
  assert all("gate" not in d and "cited" not in d for *_, d in plain.edges(data=True))
  assert export.triples_of(plain) == TRIPLES


def test_multidigraph_keeps_parallel_relations(tmp_path):
  twin = TRIPLES[1].replace(source="rebel")  # same (s, r, o), another source: another fact
  g = export.to_networkx([TRIPLES[0], TRIPLES[1], TRIPLES[1], twin])
  assert g.number_of_edges("horse", "fence") == 3  # the exact duplicate is kept once
  back = export.read_graphml(export.write_graphml(g, tmp_path / "p.graphml"))
  got = sorted((d["relation"], d["source"]) for *_, d in back.edges(data=True))
  assert got == [("in front of", "scene"), ("near", "rebel"), ("near", "scene")]
  assert sorted(back.nodes) == ["fence", "horse"]


def test_answer_graph_carries_gates_citations_and_the_question(tmp_path):
  answer = _answer()
  answer.evidence.append(CitedTriple(EXTRA, 0.3, "entity", 0.2))  # cited, not in retrieved
  g = export.answer_graph(answer)
  assert g.number_of_edges() == len(TRIPLES) + 1
  by_triple = dict(zip(export.triples_of(g), (d for *_, d in g.edges(data=True))))
  for t in TRIPLES + [EXTRA]:
    cited = next((c for c in answer.evidence if c.triple == t), None)
    assert by_triple[t]["cited"] is (cited is not None)
    assert by_triple[t].get("gate") == (cited.gate if cited else None)
  assert g.graph == {"question": answer.question, "answer": "the fence", "mode": "graphloom",
                     "supported": True}
  back = export.read_graphml(export.write_graphml(answer, tmp_path / "a.graphml"))
  assert _edges(back) == _edges(g) and back.graph == g.graph
  # the text modes cite nothing: every edge cited=False, no gates
  flat = export.answer_graph(_answer(evidence=(), mode="flat_rag"))
  assert [d["cited"] for *_, d in flat.edges(data=True)] == [False] * len(TRIPLES)
  assert not any("gate" in d for *_, d in flat.edges(data=True))


def test_instance_graph_exports_its_triples(tmp_path):
  ig = build_instance_graph(TRIPLES, tau_edge=0.5)
  back = export.read_graphml(export.write_graphml(ig, tmp_path / "ig.graphml"))
  assert sorted(export.triples_of(back), key=Triple.sort_key) == graph_triples(ig)


def test_pictures_are_pngs_with_cited_edges_highlighted(tmp_path):
  answer = _answer()
  sub = export.draw_subgraph(export.answer_graph(answer), tmp_path / "sub.png")
  _check_png(sub)
  assert _red_pixels(sub) > 200  # the cited edges
  plain = export.draw_subgraph(TRIPLES + [EXTRA, Triple("horse", "next to", "horse")],
                               tmp_path / "plain.png", title="six triples")
  _check_png(plain)
  assert _red_pixels(plain) == 0  # nothing cited, nothing red
  gates = export.draw_gates(answer, tmp_path / "gates.png")
  _check_png(gates)
  _check_png(export.draw_gates(_answer(evidence=(), mode="flat_rag"), tmp_path / "none.png"))
  _check_png(export.draw_subgraph([], tmp_path / "empty.png"))
  # the target may be overwritten (the caller's own file)
  assert export.draw_gates(answer, gates) == gates and gates.read_bytes()[:8] == PNG_MAGIC


def test_bad_input_is_a_clear_error(tmp_path):
  with pytest.raises(TypeError, match="item 1 is a tuple, not a Triple"):
    export.to_networkx([TRIPLES[0], ("horse", "near", "fence")])
  with pytest.raises(TypeError, match="expected an iterable of Triple, got str"):
    export.to_networkx("horse near fence")
  with pytest.raises(ValueError, match=r"a gate must be a number in \[0, 1\], got 1.5"):
    export.to_networkx(TRIPLES, gates={TRIPLES[0]: 1.5})
  with pytest.raises(ValueError, match="got nan"):
    export.to_networkx(TRIPLES, gates={TRIPLES[0]: math.nan})
  with pytest.raises(ValueError, match="is not among the triples"):
    export.to_networkx(TRIPLES[:1], gates={TRIPLES[1]: 0.5})
  with pytest.raises(ValueError, match="is not among the triples"):
    export.to_networkx(TRIPLES[:1], cited=[TRIPLES[1]])
  with pytest.raises(TypeError, match="expected a pipeline Answer, got list"):
    export.answer_graph(TRIPLES)
  with pytest.raises(TypeError, match="draw_gates.*got Triple"):
    export.draw_gates(TRIPLES[0], tmp_path / "g.png")
  with pytest.raises(ValueError, match=r"evidence\[0\].gate.*got -0.2"):
    export.answer_graph(_answer(evidence=((0, -0.2, "entity"),)))
  g = nx.MultiDiGraph()
  g.add_edge("a", "b", relation="r", gate=None)
  with pytest.raises(ValueError, match="attribute 'gate' = None cannot be stored in GraphML"):
    export.write_graphml(g, tmp_path / "none.graphml")
  with pytest.raises(TypeError, match="expected a networkx MultiDiGraph, got DiGraph"):
    export.write_graphml(nx.DiGraph([("a", "b")]), tmp_path / "d.graphml")
  # paths: the wrong suffix, a folder, a parent that is a file
  keep = tmp_path / "triples.jsonl"
  keep.write_text("mine\n")
  with pytest.raises(ValueError, match="triples.jsonl does not end with .graphml"):
    export.write_graphml(TRIPLES, keep)
  with pytest.raises(ValueError, match="does not end with .png"):
    export.draw_subgraph(TRIPLES, tmp_path / "sub.graphml")
  assert keep.read_text() == "mine\n"
  (tmp_path / "dir.graphml").mkdir()
  with pytest.raises(IsADirectoryError, match="dir.graphml is a folder"):
    export.write_graphml(TRIPLES, tmp_path / "dir.graphml")
  with pytest.raises(OSError, match="cannot write .*triples.jsonl/x.png"):
    export.draw_subgraph(TRIPLES, keep / "x.png")
  # a failed write leaves the target as it was
  target = export.write_graphml(TRIPLES[:1], tmp_path / "t.graphml")
  before = target.read_bytes()
  with pytest.raises(ValueError):
    export.write_graphml(g, target)
  assert target.read_bytes() == before


def test_explanations_and_the_answer_launchers_flag_check(tmp_path):
  """export.write_explanations (launch.answer --explain_dir) writes each answer's files, and
  the launcher checks the flag before any model loads (run as a program)."""
  n = export.write_explanations([_answer(), _answer(evidence=(), mode="flat_rag"), _answer()],
                                ["q/1", "2", "q/1"], tmp_path / "explain")
  assert n == 3
  (tmp_path / "a_file").write_text("x")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "launch.answer", "--config=configs/tiny.py",
                         f"--explain_dir={tmp_path / 'a_file'}"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert f"--explain_dir={tmp_path / 'a_file'}: is a file, not a folder" in proc.stderr
  names = sorted(p.name for p in (tmp_path / "explain").iterdir())
  assert names == sorted(f"{stem}{suffix}" for stem in ("q_1", "2", "q_1_2")
                         for suffix in (".graphml", "_subgraph.png", "_gates.png"))
  g = export.read_graphml(tmp_path / "explain" / "q_1.graphml")
  assert g.graph["question"] == "What is the horse in front of?"
  assert sum(d["cited"] for *_, d in g.edges(data=True)) == 2
  for p in (tmp_path / "explain").glob("*.png"):
    assert p.read_bytes()[:8] == PNG_MAGIC
