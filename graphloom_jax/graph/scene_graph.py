"""Visual-Genome-style scene graphs as direct input to the instance graph.

Accepted layout (one image), as in VG's scene_graphs.json / relationships.json:
  {"image_id": id,
   "objects": [{"object_id": int, "names": [str] | "name": str, "x", "y", "w", "h"}, ...],
   "relationships": [{"predicate": str, "subject_id": int, "object_id": int,
                      "confidence": float (optional, default 1.0)}, ...]}
A relationship may instead nest its endpoints, as relationships.json does:
  {"predicate": str, "subject": {object...}, "object": {object...}}
Each relationship becomes a `Triple` with source "scene", provenance instance = image id,
region = the union box (x, y, w, h) of subject and object, and ref naming the relationship and
its two objects ("relationship <relationship_id or index> (object <id> -> object <id>)").
"""

from __future__ import annotations

import json
import pathlib

from graphloom_jax.graph.triples import Provenance, ReadReport, Triple, TripleFormatError


def _name(obj: dict, where: str) -> str:
  if isinstance(obj.get("names"), list) and obj["names"] and isinstance(obj["names"][0], str):
    return obj["names"][0].strip()
  if isinstance(obj.get("name"), str):
    return obj["name"].strip()
  raise TripleFormatError(f"{where}: object needs 'names' (list of str) or 'name', got "
                          f"keys {sorted(obj)}")


def _box(obj: dict) -> tuple[float, float, float, float] | None:
  if all(isinstance(obj.get(k), (int, float)) for k in "xywh"):
    return (obj["x"], obj["y"], obj["w"], obj["h"])
  return None


def _union(a, b):
  if a is None or b is None:
    return a or b
  x, y = min(a[0], b[0]), min(a[1], b[1])
  return (x, y, max(a[0] + a[2], b[0] + b[2]) - x, max(a[1] + a[3], b[1] + b[3]) - y)


def scene_graph_triples(graph: dict, where: str = "scene graph", strict: bool = True,
                        report: ReadReport | None = None) -> list[Triple]:
  """Triples of one VG-style scene graph; bad relationships raise (strict) or are counted."""
  if not isinstance(graph, dict):
    raise TripleFormatError(f"{where}: expected an object, got {type(graph).__name__}")
  image = str(graph.get("image_id", ""))
  where = f"{where} (image {image})"
  objects = {}
  for i, obj in enumerate(graph.get("objects", [])):
    if not isinstance(obj, dict) or "object_id" not in obj:
      raise TripleFormatError(f"{where}: objects[{i}] needs an 'object_id'")
    objects[obj["object_id"]] = obj
  out = []
  for i, rel in enumerate(graph.get("relationships", [])):
    at = f"{where} relationships[{i}]"
    try:
      if not isinstance(rel, dict) or not isinstance(rel.get("predicate"), str):
        raise TripleFormatError(f"{at}: needs a 'predicate' string")
      ends = []
      for end in ("subject", "object"):
        if isinstance(rel.get(end), dict):
          ends.append(rel[end])
        elif rel.get(f"{end}_id") in objects:
          ends.append(objects[rel[f"{end}_id"]])
        else:
          raise TripleFormatError(f"{at}: {end}_id {rel.get(f'{end}_id')!r} is not an object "
                                  f"of this image")
      s, o = ends
      ref = (f"relationship {rel.get('relationship_id', i)} (object {s.get('object_id', '?')} "
             f"-> object {o.get('object_id', '?')})")
      out.append(Triple(_name(s, at), rel["predicate"].strip().lower(), _name(o, at),
                        rel.get("confidence", 1.0), "scene",
                        Provenance(image, region=_union(_box(s), _box(o)), ref=ref)))
    except TripleFormatError as e:
      if strict:
        raise TripleFormatError(f"{at}: {e}" if not str(e).startswith(at) else str(e)) from None
      if report is not None:
        report.skipped += 1
        report.errors.append(str(e))
    else:
      if report is not None:
        report.read += 1
  return out


def read_scene_graphs(path, strict: bool = True) -> tuple[list[Triple], ReadReport]:
  """Reads a JSON list of scene graphs (VG's scene_graphs.json) or a JSONL file of them."""
  path = pathlib.Path(path)
  report = ReadReport(str(path))
  if path.name.endswith(".jsonl"):
    from graphloom_jax.graph.triples import iter_jsonl
    graphs = [(f"{path}:{n}", g) for n, g in iter_jsonl(path, strict, report, "scene graph")]
  else:
    with open(path, encoding="utf-8") as f:
      try:
        data = json.load(f)
      except json.JSONDecodeError as e:
        raise TripleFormatError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
    data = data if isinstance(data, list) else [data]
    graphs = [(f"{path}: graph[{i}]", g) for i, g in enumerate(data)]
  out = []
  for where, g in graphs:
    try:
      out.extend(scene_graph_triples(g, where, strict, report))
    except TripleFormatError as e:
      if strict:
        raise
      report.skipped += 1
      report.errors.append(str(e))
  return out, report
