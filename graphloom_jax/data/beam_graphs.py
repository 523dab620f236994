"""Instance graphs and triple embeddings for a whole corpus as an Apache Beam pipeline.

  corpus = beam_graphs.Corpus("scenekb", "train")       # or Corpus("mmqa", "dev", root=DIR)
  with beam.Pipeline(options=PipelineOptions(runner="DirectRunner")) as p:
    p | beam_graphs.BuildCorpusGraphs(corpus, config, out_dir, make_embedder)
  graphs = beam_graphs.read_output(out_dir)          # instance_id -> GraphRecord
  index = beam_graphs.build_index(out_dir, "scann")  # one index over every instance's triples

Any Beam runner runs it (DirectRunner in the tests; Dataflow, Flink or Spark through
`launch.build_graphs --runner=...` and their pipeline options). The stages:

  1. ReadCorpus: the corpus's document files are read inside the pipeline (ReadFromText, .gz
     included) and turned into records {"instance_id", "triples", "objects"}: a SceneKB image
     (its scene graph) per instance the split's questions name; for MMQA every table (one triple
     per row and non-key column: key cell -relation = column name-> cell, source "table") and
     every image whose record carries a scene graph, among the documents the split's questions
     list. MMQA texts need a triple extractor (REBEL) and are not read here; documents without
     triples are skipped and counted (Beam counters `beam_graphs/skipped_*`).
  2. BuildGraph: `pipeline.instance.build_graph` on each record, with the corpus's knowledge
     sources loaded once per worker in `setup()` (SceneKB: its WordNet facts).
  3. Embedding: every distinct verbalised triple text of the corpus once, in batches
     (`beam.BatchElements`), by an embedder made once per worker in `setup()` from
     `make_embedder` (a picklable zero-argument callable); vectors are joined back to every
     (instance, row) that uses the text, then to their instance.
  4. Writing: instances are hashed into `num_shards` shards (crc32 of the id); each shard is one
     `graphs-SSSSS-of-NNNNN.jsonl` (one line per instance, sorted by id: its triples, objects and
     the offset of its rows in the shard's matrix) and one `embeddings-SSSSS-of-NNNNN.npy`
     (float32 [rows of the shard, D]). Empty shards are written too. `manifest.json` is written
     last, from every shard's summary, so its presence means the output is complete.

The output equals the single-process path (`pipeline.instance.build` on each record with the
same embedder): the same graphs, triples in the same order, objects, and embeddings bit for bit
when the embedder gives a text the same vector whatever batch it is in (tests/test_beam_graphs).
The corpus index (`build_index`) holds every (instance, row) in manifest order: instances sorted
by id, each instance's rows in order; `corpus_rows` names them.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import pathlib
import zlib
from typing import Callable, Iterable, Sequence

import numpy as np

from graphloom_jax import optional
from graphloom_jax.graph import instance_graph
from graphloom_jax.graph.triples import Provenance, Triple, triple_from_json
from graphloom_jax.retrieval import index as index_lib

beam = optional.require("apache_beam", "graphloom_jax.data.beam_graphs")
FileSystems = optional.require("apache_beam.io.filesystems",
                               "graphloom_jax.data.beam_graphs").FileSystems
Metrics = optional.require("apache_beam.metrics", "graphloom_jax.data.beam_graphs").Metrics

MANIFEST = "manifest.json"
DATASETS = ("scenekb", "mmqa")
COUNTER_NAMESPACE = "beam_graphs"


def _clean(text) -> str:
  """Whitespace (line breaks included) collapsed to single spaces."""
  return " ".join(str(text).split())


def table_triples(table) -> list[Triple]:
  """An MMQA table (`mmqa.TableDoc`) as triples: for each row and each column other than the
  key column, (key cell, column name, cell), source "table", confidence 1. The key column is
  the one the header's metadata marks `is_key_column` (else the first); empty cells and
  unnamed columns give no triple."""
  header = [_clean(h) for h in table.header]
  key = 0
  raw_header = (table.raw.get("table") or {}).get("header") or []
  for j, h in enumerate(raw_header):
    if isinstance(h, dict) and (h.get("metadata") or {}).get("is_key_column"):
      key = j
      break
  out = []
  for i, row in enumerate(table.rows):
    subject = _clean(row[key]) if key < len(row) else ""
    if not subject:
      continue
    for j, cell in enumerate(row):
      obj = _clean(cell)
      if j == key or not obj or not header[j]:
        continue
      out.append(Triple(subject, header[j], obj, 1.0, "table",
                        Provenance(instance=table.id, ref=f"row {i}, column {j}")))
  return out


@dataclasses.dataclass(frozen=True)
class Corpus:
  """Which records a corpus holds and which knowledge sources enrich them. Picklable: workers
  call `kb_sources()` in setup, and `record_from_line` on the document files' lines.

  dataset: "scenekb" (root None = the embedded copy) or "mmqa" (root = a folder in the official
  MultimodalQA layout); split: the questions file whose instances / documents make the corpus.
  """
  dataset: str
  split: str
  root: str | None = None

  def __post_init__(self):
    if self.dataset not in DATASETS:
      raise ValueError(f"Corpus: unknown dataset {self.dataset!r}; expected one of {DATASETS}")
    if self.dataset == "mmqa" and self.root is None:
      raise ValueError("Corpus('mmqa', ...) needs root, the folder of the MMQA jsonl files")

  @functools.cached_property
  def _root(self) -> pathlib.Path:
    from graphloom_jax.data import scenekb
    return scenekb.FOLDER if self.root is None else pathlib.Path(self.root)

  def wanted_ids(self) -> frozenset[str]:
    """Ids of the instances (SceneKB) or documents (MMQA) the split's questions name."""
    from graphloom_jax.data import mmqa, scenekb
    if self.dataset == "scenekb" and self.split not in scenekb.SPLITS:
      raise ValueError(f"Corpus: unknown SceneKB split {self.split!r}; expected one of "
                       f"{scenekb.SPLITS}")
    path = mmqa.find_file(self._root, f"MMQA_{self.split}")
    if path is None:
      raise FileNotFoundError(f"Corpus: no MMQA_{self.split}.jsonl(.gz) in {self._root}")
    questions, _ = mmqa.read_questions(path)
    if self.dataset == "scenekb":
      return frozenset(q.extra["instance_id"] for q in questions)
    return frozenset(d for q in questions for d in (*q.candidate_doc_ids,
                                                    *q.supporting_doc_ids))

  def document_files(self) -> list[str]:
    """The files whose lines `record_from_line` reads ([] entries are never returned)."""
    from graphloom_jax.data import mmqa
    if self.dataset == "scenekb":
      path = mmqa.find_file(self._root, "MMQA_images")
      if path is None:
        raise FileNotFoundError(f"Corpus: no MMQA_images.jsonl(.gz) in {self._root}")
      return [str(path)]
    found = [mmqa.find_file(self._root, f"MMQA_{kind}") for kind in ("tables", "images")]
    found = [str(p) for p in found if p is not None]
    if not found:
      raise FileNotFoundError(f"Corpus: {self._root} has neither MMQA_tables nor MMQA_images "
                              "(.jsonl or .jsonl.gz)")
    return found

  def record_from_line(self, line: str, where: str = "") -> tuple[str, dict | None]:
    """(document id, record or None when the document gives no triples) of one line of a
    document file; the record is what `instance.build` takes: {"instance_id", "triples",
    "objects"} (triples a scene graph dict or a list of triple records)."""
    from graphloom_jax.data import mmqa
    raw = json.loads(line)
    if isinstance(raw, dict) and "table" in raw:
      doc = mmqa.table_from_json(raw, where or "MMQA_tables")
      triples = table_triples(doc)
      return doc.id, ({"instance_id": doc.id, "triples": [t.to_json() for t in triples],
                       "objects": None} if triples else None)
    doc = mmqa.image_from_json(raw, where or "MMQA_images")
    graph = doc.extra.get("scene_graph")
    if not isinstance(graph, dict) or not graph.get("relationships"):
      return doc.id, None
    return doc.id, {"instance_id": doc.id, "triples": graph, "objects": None}

  def records(self) -> list[dict]:
    """Every record of the corpus, sorted by instance id (the single-process reading of what
    ReadCorpus yields)."""
    import gzip
    wanted = self.wanted_ids()
    out = {}
    for path in self.document_files():
      opener = gzip.open if path.endswith(".gz") else open
      with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
          if not line.strip():
            continue
          doc_id, record = self.record_from_line(line, f"{path}:{lineno}")
          if doc_id in wanted and record is not None:
            if doc_id in out and out[doc_id] != record:
              raise ValueError(f"{path}:{lineno}: document {doc_id!r} appears again with "
                               "different contents")
            out[doc_id] = record
    return [out[k] for k in sorted(out)]

  def kb_sources(self) -> list:
    """The knowledge sources `build_graph` enriches with (SceneKB: its WordNet facts)."""
    if self.dataset == "scenekb":
      from graphloom_jax.data import scenekb
      return [scenekb.wordnet_source(scenekb.read_kb(self._root))]
    return []


def graph_config(config):
  """The part of a full config `build_graph` reads (graph.*), as a small picklable ConfigDict."""
  import ml_collections
  return ml_collections.ConfigDict({"graph": config.graph.to_dict()})


def shard_of(instance_id: str, num_shards: int) -> int:
  return zlib.crc32(instance_id.encode("utf-8")) % num_shards


def shard_names(num_shards: int, shard: int) -> tuple[str, str]:
  tag = f"{shard:05d}-of-{num_shards:05d}"
  return f"graphs-{tag}.jsonl", f"embeddings-{tag}.npy"


# ------------------------------------------------------------------------- single process


@dataclasses.dataclass
class GraphRecord:
  """One instance of the output: its graph's triples (pool rows, stable order), object names
  and the rows' embeddings float32 [len(triples), D]."""
  instance_id: str
  triples: list[Triple]
  objects: list[str]
  vectors: np.ndarray

  def graph(self):
    """The instance's networkx MultiDiGraph, rebuilt from its triples (already filtered and
    canonical, so nothing is dropped or renamed): equal to `instance.build_graph`'s."""
    return instance_graph.build_instance_graph(self.triples, tau_edge=0.0, canonical=False)

  def instance_graph(self, config):
    """The `pipeline.instance.InstanceGraph` (pool and, for a large pool, the index
    `config.retrieval.index` names), as `instance.build` makes it."""
    from graphloom_jax.pipeline import instance
    from graphloom_jax.retrieval.subgraph import TriplePool
    if config.retrieval.index not in instance.INDEXES:
      raise ValueError(f"config.retrieval.index={config.retrieval.index!r}; expected one of "
                       f"{instance.INDEXES}")
    index = (index_lib.make_index(config.retrieval.index, self.vectors)
             if len(self.triples) > 4 * config.retrieval.seeds else None)
    return instance.InstanceGraph(self.graph(), list(self.triples), list(self.objects),
                                  TriplePool(self.triples, self.vectors, index=index),
                                  self.instance_id)


def build_corpus_local(corpus: Corpus, config, embedder) -> dict[str, GraphRecord]:
  """The single-process path: `instance.build` on every record of the corpus, in one process
  (what the Beam pipeline must reproduce)."""
  from graphloom_jax.pipeline import instance
  kb_sources = corpus.kb_sources()
  out = {}
  for r in corpus.records():
    g = instance.build(r["triples"], config=config, embedder=embedder, kb_sources=kb_sources,
                       objects=r["objects"], instance_id=r["instance_id"])
    out[r["instance_id"]] = GraphRecord(r["instance_id"], g.triples, g.objects,
                                        g.pool.embeddings)
  return out


# ------------------------------------------------------------------------- reading the output


def _open_read(path: str):
  return FileSystems.open(path)


def _join(directory, name) -> str:
  return FileSystems.join(str(directory), name)


def read_manifest(directory) -> dict:
  path = _join(directory, MANIFEST)
  if not FileSystems.exists(path):
    raise FileNotFoundError(f"{path} not found: {directory} is not a finished build_graphs "
                            "output (the manifest is written last)")
  with _open_read(path) as f:
    return json.loads(f.read().decode("utf-8"))


def read_output(directory) -> dict[str, GraphRecord]:
  """Every instance of a pipeline output folder (local or any Beam filesystem), sorted by id."""
  manifest = read_manifest(directory)
  n = manifest["num_shards"]
  out = {}
  for s in range(n):
    graphs_name, emb_name = shard_names(n, s)
    with _open_read(_join(directory, emb_name)) as f:
      matrix = np.load(io.BytesIO(f.read()), allow_pickle=False)
    with _open_read(_join(directory, graphs_name)) as f:
      lines = f.read().decode("utf-8").splitlines()
    for line in lines:
      rec = json.loads(line)
      start, count = rec["row_offset"], len(rec["triples"])
      out[rec["instance_id"]] = GraphRecord(
          rec["instance_id"], [triple_from_json(t) for t in rec["triples"]], rec["objects"],
          matrix[start:start + count].reshape(count, manifest["dim"]))
  if len(out) != manifest["instances"]:
    raise ValueError(f"{directory}: the shards hold {len(out)} instances, {MANIFEST} says "
                     f"{manifest['instances']}")
  return {k: out[k] for k in sorted(out)}


def corpus_arrays(records: dict[str, GraphRecord]) -> tuple[np.ndarray, list[tuple[str, int]]]:
  """All rows of all instances in index order (instances sorted by id, rows in order):
  (vectors [N, D], [(instance_id, row)] of each index id)."""
  keys = sorted(records)
  rows = [(k, i) for k in keys for i in range(len(records[k].triples))]
  mats = [records[k].vectors for k in keys if len(records[k].triples)]
  if not mats:
    raise ValueError("corpus_arrays: the corpus holds no triples")
  return np.concatenate(mats).astype(np.float32, copy=False), rows


def corpus_rows(directory) -> list[tuple[str, int]]:
  """(instance_id, row) of each id of the index `build_index` makes over this output."""
  return corpus_arrays(read_output(directory))[1]


def build_index(directory, kind: str = "scann", **options):
  """One exact or ScaNN index (ids 0..N-1 in `corpus_rows` order) over every triple of a
  pipeline output; ScaNN options default to `retrieval.index.scann_defaults(N)`."""
  vectors, _ = corpus_arrays(read_output(directory))
  return index_lib.make_index(kind, vectors, **options)


# ------------------------------------------------------------------------- the Beam pipeline


def _counter(name):
  return Metrics.counter(COUNTER_NAMESPACE, name)


class _ParseLines(beam.DoFn):
  def __init__(self, corpus: Corpus, wanted: frozenset, path: str):
    self.corpus, self.wanted, self.path = corpus, wanted, path

  def setup(self):
    self.read = _counter("documents_read")
    self.skipped_unlisted = _counter("skipped_unlisted")
    self.skipped_no_triples = _counter("skipped_no_triples")

  def process(self, line):
    if not line.strip():
      return
    doc_id, record = self.corpus.record_from_line(line, self.path)
    self.read.inc()
    if doc_id not in self.wanted:
      self.skipped_unlisted.inc()
    elif record is None:
      self.skipped_no_triples.inc()
    else:
      yield doc_id, record


def _one_per_id(kv):
  # A document id twice in the files keeps one record, whichever line Beam meets first is
  # irrelevant: the single-process reader keeps the last, so keep the records only when equal.
  doc_id, records = kv
  records = list(records)
  if any(r != records[0] for r in records[1:]):
    raise ValueError(f"ReadCorpus: document {doc_id!r} appears {len(records)} times with "
                     "different contents")
  return records[0]


class ReadCorpus(beam.PTransform):
  """The corpus's records (see the module docstring), read inside the pipeline."""

  def __init__(self, corpus: Corpus):
    super().__init__()
    self.corpus = corpus

  def expand(self, pbegin):
    wanted = self.corpus.wanted_ids()
    parts = []
    for i, path in enumerate(self.corpus.document_files()):
      parts.append(pbegin | f"Read{i}" >> beam.io.ReadFromText(path)
                   | f"Parse{i}" >> beam.ParDo(_ParseLines(self.corpus, wanted, path)))
    return (parts | "Flatten" >> beam.Flatten()
            | "GroupById" >> beam.GroupByKey() | "OnePerId" >> beam.Map(_one_per_id))


class BuildGraph(beam.DoFn):
  """record -> (instance_id, {"triples": [Triple], "objects": [str]})."""

  def __init__(self, corpus: Corpus, config):
    self.corpus, self.config = corpus, config

  def setup(self):
    self.kb_sources = self.corpus.kb_sources()
    self.built = _counter("instances_built")
    self.rows = _counter("triples_built")

  def process(self, record):
    from graphloom_jax.pipeline import instance
    _, triples, objects = instance.build_graph(
        record["triples"], config=self.config, kb_sources=self.kb_sources,
        objects=record["objects"], instance_id=record["instance_id"])
    self.built.inc()
    self.rows.inc(len(triples))
    yield record["instance_id"], {"triples": triples, "objects": objects}


class EmbedTexts(beam.DoFn):
  """[text] -> (text, float32 [D]) for each, the embedder made once per worker."""

  def __init__(self, make_embedder: Callable):
    self.make_embedder = make_embedder

  def setup(self):
    embedder = self.make_embedder()
    self._embed = getattr(embedder, "embed", embedder)
    self.embedded = _counter("texts_embedded")
    self.batches = _counter("embedding_batches")

  def process(self, texts):
    texts = list(texts)
    vectors = np.asarray(self._embed(texts), np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
      raise ValueError(f"embedder returned shape {vectors.shape} for {len(texts)} texts")
    self.embedded.inc(len(texts))
    self.batches.inc()
    for t, v in zip(texts, vectors):
      yield t, v


def _uses(kv):
  instance_id, built = kv
  for row, t in enumerate(built["triples"]):
    yield t.verbalize(), (instance_id, row)


def _vector_to_rows(kv):
  text, joined = kv
  vectors = list(joined["vector"])
  if len(vectors) != 1:
    raise ValueError(f"text {text!r} got {len(vectors)} embeddings, expected 1")
  for instance_id, row in joined["use"]:
    yield instance_id, (row, vectors[0])


def _assemble(kv):
  instance_id, joined = kv
  (built,) = list(joined["graph"])
  rows = sorted(joined["rows"], key=lambda r: r[0])
  if [r for r, _ in rows] != list(range(len(built["triples"]))):
    raise ValueError(f"instance {instance_id!r}: embeddings for rows "
                     f"{[r for r, _ in rows][:10]} of {len(built['triples'])}")
  vectors = np.stack([v for _, v in rows]) if rows else None
  return instance_id, built["triples"], built["objects"], vectors


class WriteShard(beam.DoFn):
  """(shard, {"items": [...], "shard": [None]}) -> the shard's two files; yields a summary."""

  def __init__(self, out_dir: str, num_shards: int):
    self.out_dir, self.num_shards = out_dir, num_shards

  def process(self, kv):
    shard, joined = kv
    items = sorted(joined["items"], key=lambda x: x[0])
    dims = {v.shape[1] for _, _, _, v in items if v is not None}
    if len(dims) > 1:
      raise ValueError(f"shard {shard}: embeddings of different widths {sorted(dims)}")
    dim = dims.pop() if dims else 0
    lines, mats, offset = [], [], 0
    for instance_id, triples, objects, vectors in items:
      lines.append(json.dumps({"instance_id": instance_id, "row_offset": offset,
                               "objects": objects, "triples": [t.to_json() for t in triples]},
                              ensure_ascii=False, sort_keys=True))
      if vectors is not None:
        mats.append(vectors)
        offset += len(vectors)
    matrix = (np.concatenate(mats) if mats else np.zeros((0, dim), np.float32))
    graphs_name, emb_name = shard_names(self.num_shards, shard)
    buf = io.BytesIO()
    np.save(buf, matrix.astype(np.float32, copy=False), allow_pickle=False)
    # Names are fixed per shard, so a retried bundle rewrites the same files.
    with FileSystems.create(_join(self.out_dir, emb_name)) as f:
      f.write(buf.getvalue())
    with FileSystems.create(_join(self.out_dir, graphs_name)) as f:
      f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    yield {"shard": shard, "instances": len(items), "rows": int(matrix.shape[0]), "dim": dim}


class WriteManifest(beam.DoFn):
  def __init__(self, out_dir: str, meta: dict):
    self.out_dir, self.meta = out_dir, meta

  def process(self, summaries):
    summaries = sorted(summaries, key=lambda s: s["shard"])
    dims = {s["dim"] for s in summaries if s["rows"]}
    if len(dims) > 1:
      raise ValueError(f"shards hold embeddings of different widths {sorted(dims)}")
    manifest = {**self.meta, "num_shards": len(summaries),
                "instances": sum(s["instances"] for s in summaries),
                "rows": sum(s["rows"] for s in summaries),
                "dim": dims.pop() if dims else 0, "shards": summaries}
    with FileSystems.create(_join(self.out_dir, MANIFEST)) as f:
      f.write(json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
    yield manifest


class BuildCorpusGraphs(beam.PTransform):
  """The whole pipeline (see the module docstring); applied to a pipeline's root, returns
  the PCollection holding the manifest dict once everything is written."""

  def __init__(self, corpus: Corpus, config, out_dir: str, make_embedder: Callable, *,
               num_shards: int = 8, min_batch_size: int = 16, max_batch_size: int = 256,
               embedder_id: str = ""):
    super().__init__()
    if num_shards < 1:
      raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    self.corpus, self.config = corpus, graph_config(config)
    self.out_dir, self.make_embedder = str(out_dir), make_embedder
    self.num_shards = num_shards
    self.batch = (min_batch_size, max_batch_size)
    self.embedder_id = embedder_id

  def expand(self, pbegin):
    graphs = (pbegin | "ReadCorpus" >> ReadCorpus(self.corpus)
              | "BuildGraph" >> beam.ParDo(BuildGraph(self.corpus, self.config)))
    uses = graphs | "TextUses" >> beam.FlatMap(_uses)
    vectors = (uses | "Texts" >> beam.Keys() | "Distinct" >> beam.Distinct()
               | "Batch" >> beam.BatchElements(min_batch_size=self.batch[0],
                                               max_batch_size=self.batch[1])
               | "Embed" >> beam.ParDo(EmbedTexts(self.make_embedder)))
    rows = ({"vector": vectors, "use": uses} | "JoinTexts" >> beam.CoGroupByKey()
            | "ToRows" >> beam.FlatMap(_vector_to_rows))
    instances = ({"graph": graphs, "rows": rows} | "JoinRows" >> beam.CoGroupByKey()
                 | "Assemble" >> beam.Map(_assemble))
    n = self.num_shards
    keyed = instances | "ShardKey" >> beam.Map(lambda x: (shard_of(x[0], n), x))
    every = (pbegin | "Shards" >> beam.Create(list(range(n)))
             | "ShardSeed" >> beam.Map(lambda s: (s, None)))
    summaries = ({"items": keyed, "shard": every} | "GroupShards" >> beam.CoGroupByKey()
                 | "WriteShards" >> beam.ParDo(WriteShard(self.out_dir, n)))
    meta = {"dataset": self.corpus.dataset, "split": self.corpus.split,
            "root": self.corpus.root, "embedder": self.embedder_id,
            "graph_config": self.config.graph.to_dict()}
    return (summaries | "Summaries" >> beam.combiners.ToList()
            | "WriteManifest" >> beam.ParDo(WriteManifest(self.out_dir, meta)))


def run(corpus: Corpus, config, out_dir, make_embedder: Callable,
        pipeline_args: Sequence[str] = (), **kwargs) -> dict:
  """Runs BuildCorpusGraphs on the runner `pipeline_args` name (default DirectRunner) and
  waits for it; returns the manifest."""
  PipelineOptions = optional.require("apache_beam.options.pipeline_options",
                                    "beam_graphs.run").PipelineOptions
  args = list(pipeline_args)
  if not any(a.startswith("--runner") for a in args):
    args.append("--runner=DirectRunner")
  # A manifest left by an earlier run would make a half-written output look finished.
  old = _join(out_dir, MANIFEST)
  if FileSystems.exists(old):
    FileSystems.delete([old])
  with beam.Pipeline(options=PipelineOptions(args)) as p:
    _ = p | "BuildCorpusGraphs" >> BuildCorpusGraphs(corpus, config, str(out_dir),
                                                     make_embedder, **kwargs)
  return read_manifest(out_dir)
