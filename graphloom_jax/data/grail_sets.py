"""GRAIL's evidence sets of the datasets (`retrieval.grail_data.EvidenceSet`):

  load_evidence_set(data, mmqa_dir, embedded_dir, per_split, pathqa_dir, pathqa_configs)
                                                'mmqa', 'embedded', 'pathquestion' or 'wc2014'
  from_config(grail_section)                    the same, read from the config's `grail` keys
  mmqa_evidence_set(folder, split="dev")        MMQA questions (see below)
  embedded_evidence_set(folder=None)            SceneKB v1, the small copy in graphloom_jax/data
  pathqa_evidence_set(datasets)                 PathQuestion / WorldCup2014 answer paths (below)

MMQA: an image item is the image's Wikipedia title (every image in MMQA_images, gold or not;
pixels are never used). Texts and tables are their full content when MMQA_texts / MMQA_tables
are in the folder. Offline (when the folder holds only the dev file and the image metadata)
a text or table document is represented by the spans the questions themselves quote from it
(answers' and intermediate answers' text_instances, and answer strings located in the
question's table), merged over every question that cites the document. Gold documents with no
content at all are dropped from their question's gold set (counted in `notes`, which also say
which files were absent). Questions are split by a hash of their qid into train (40%),
validation (10%) and test (50%), since only the dev split is labelled offline.

PathQuestion / WorldCup2014 (graphloom_jax.data.pathqa): the pool is every fact of the loaded
datasets' KBs, verbalised "subject relation object" with readable names (text modality; a fact
two KBs share is one item). A question's gold items are its answer path's hops in order; its
distractors (hard negatives) are the other facts of its instance graph (the KB neighbourhood of
its topic entity, hops + 1). Completion hides the last hop behind the earlier ones
(`EvidenceSet.hide = "last"`): the covered evidence holds the bridge entity, the missing fact
leaves from it. A question's family is its dataset (PQ-2H, PQL-3H, WC-2H, ...), the macro
average is over the datasets loaded, and the splits are the datasets' path splits (no answer
path in two splits).
"""

from __future__ import annotations

import collections
import pathlib

import numpy as np

from graphloom_jax.data import mmqa, pathquestion, scenekb, wc2014
from graphloom_jax.retrieval.grail_data import (MODALITIES, EvidenceDataError, EvidencePool,
                                                EvidenceQuestion, EvidenceSet, hash_split,
                                                triple_modality)


def _answer_groups(q):
  """The answers and every intermediate answer list of an MMQA question."""
  yield q.answers
  yield from q.intermediate_answers


def _table_text(t) -> str:
  rows = "; ".join(" | ".join(r) for r in t.rows)
  return f"{t.title} {t.name}: {' | '.join(t.header)}; {rows}"


def _quoted_spans(data) -> dict[str, dict[str, None]]:
  """Document key -> the spans the questions' answers quote from it (an ordered set)."""
  spans: dict[str, dict[str, None]] = collections.defaultdict(dict)
  for q in data.questions:
    for group in _answer_groups(q):
      for ans in group:
        for ti in ans.text_instances:
          if isinstance(ti, dict) and ti.get("doc_id") and ti.get("text"):
            spans["text:" + ti["doc_id"]][ti["text"].strip()] = None
        if ans.table_indices and q.table_id:
          spans["table:" + q.table_id][ans.answer.strip()] = None
  return spans


def _evidence_questions(data, index: dict):
  """The questions with at least one representable gold document, the gold documents dropped
  per part and the number of questions dropped."""
  questions, dropped, dropped_q = [], collections.Counter(), 0
  for q in data.questions:
    gold, seen = [], set()
    for doc_id, part in q.supporting_context:
      key = f"{part}:{doc_id}"
      if key in seen:
        continue  # the dev file repeats some supporting documents
      seen.add(key)
      if key in index:
        gold.append(index[key])
      else:
        dropped[part] += 1
    if not gold:
      dropped_q += 1
      continue
    cand = [index[k] for k in (["image:" + d for d in q.image_doc_ids]
                               + ["text:" + d for d in q.text_doc_ids]) if k in index]
    gold_set = set(gold)
    questions.append(EvidenceQuestion(
        qid=q.qid, question=q.question, family=q.family, split=hash_split(q.qid),
        gold=tuple(gold), distractors=tuple(dict.fromkeys(c for c in cand if c not in gold_set))))
  return questions, dropped, dropped_q


def mmqa_evidence_set(folder, split: str = "dev") -> EvidenceSet:
  """MMQA questions of `split` (read by graphloom_jax.data.mmqa) over every image title plus the
  text and table documents: their full content where MMQA_texts / MMQA_tables are in `folder`,
  else the spans the questions quote from them (see the module docstring)."""
  data = mmqa.MMQA.load(folder, split)
  keys, texts, modality, index = [], [], [], {}

  def add(key, text, mod):
    index[key] = len(keys)
    keys.append(key)
    texts.append(text)
    modality.append(MODALITIES.index(mod))

  for doc in data.images.values():
    add("image:" + doc.id, doc.title, "image")
  for doc in data.texts.values():
    add("text:" + doc.id, f"{doc.title}. {doc.text}", "text")
  for doc in data.tables.values():
    add("table:" + doc.id, _table_text(doc), "table")
  spans = _quoted_spans(data)
  quoted = 0
  for key in sorted(spans):
    if key not in index:
      add(key, "; ".join(spans[key]), key.split(":", 1)[0])
      quoted += 1

  questions, dropped, dropped_q = _evidence_questions(data, index)
  absent = [name for name, present in (
      ("MMQA_texts", data.texts), ("MMQA_tables", data.tables), ("MMQA_images", data.images),
      ("the train split", mmqa.find_file(folder, "MMQA_train"))) if not present]
  notes = [
      f"MMQA ({folder}, {split}): not available here: {', '.join(absent + ['image pixels'])}; "
      "images are represented by their Wikipedia titles.",
      f"pool: {len(data.images)} images, {len(data.texts)} texts, {len(data.tables)} tables, and "
      f"{quoted} text/table documents represented only by the spans the questions quote from "
      "them (answers / intermediate answers).",
      f"gold documents without any content, dropped: {dict(sorted(dropped.items()))}; "
      f"questions left with no representable gold: {dropped_q}.",
      f"splits by qid hash: train 40% / validation 10% / test 50% of {split}.",
  ]
  return EvidenceSet("mmqa", EvidencePool(keys, texts, np.asarray(modality, np.int32)),
                     questions, notes)


DATA = ("embedded", "mmqa", "pathquestion", "wc2014")
PATH_READERS = {"pathquestion": pathquestion, "wc2014": wc2014}


def load_evidence_set(data: str, mmqa_dir: str = "", embedded_dir: str = "",
                      per_split: int = 0, pathqa_dir: str = "",
                      pathqa_configs: str = "") -> EvidenceSet:
  """'mmqa' (the dev file + image metadata in mmqa_dir, which must be given), 'embedded'
  (a SceneKB in embedded_dir, "" = the small v1 copy shipped in graphloom_jax/data/resources,
  `scenekb.V1_FOLDER`, on which GRAIL's committed SceneKB figures were made), or 'pathquestion' / 'wc2014' (the release folder pathqa_dir
  and the comma-separated datasets pathqa_configs, e.g. "PQ-2H,PQL-3H"). per_split > 0 keeps
  the first per_split questions of each split over their own gold + distractor items
  (`EvidenceSet.subset`), for quick runs."""
  if data == "mmqa":
    if not mmqa_dir:
      raise ValueError("load_evidence_set('mmqa') needs mmqa_dir, the folder with the official "
                       "MMQA_dev.jsonl(.gz) and MMQA_images.jsonl(.gz) (in the launchers: "
                       "--config.grail.mmqa_dir=FOLDER)")
    es = mmqa_evidence_set(mmqa_dir)
  elif data == "embedded":
    es = embedded_evidence_set(embedded_dir or None)
  elif data in PATH_READERS:
    es = pathqa_evidence_set(load_pathqa(data, pathqa_dir, pathqa_configs))
  else:
    raise ValueError(f"unknown data set {data!r}; expected one of {DATA}")
  if per_split > 0:
    splits = sorted({q.split for q in es.questions})
    es = es.subset([i for s in splits for i in es.select([s])[:per_split]])
  return es


def embedded_evidence_set(folder=None) -> EvidenceSet:
  """A SceneKB (graphloom_jax.data.scenekb; folder None: the small v1 copy in the package,
  `scenekb.V1_FOLDER`) as evidence sets.

  Pool: every distinct verbalized triple of the benchmark ("subject relation object"): the
  scene-graph triples of all scenes, noise included, as the image modality, and the WordNet
  triples as the text modality (the benchmark serves them as text documents). Scene triples
  with the same wording in different scenes are one item: the question text does not name its
  scene, so they are indistinguishable to any retriever. Gold = the question's gold triples;
  distractors = the question's scene / WordNet triples that share an entity with a gold triple.
  """
  folder = scenekb.V1_FOLDER if folder is None else pathlib.Path(folder)
  keys, texts, modality, index = [], [], [], {}

  def item(t) -> int:
    mod = triple_modality(t.source)
    key = f"{mod}:{t.verbalize()}"
    if key not in index:
      index[key] = len(keys)
      keys.append(key)
      texts.append(t.verbalize())
      modality.append(MODALITIES.index(mod))
    return index[key]

  loaded = {split: scenekb.load(split, folder) for split in scenekb.SPLITS}
  for t in loaded[scenekb.SPLITS[0]].kb_triples:
    item(t)
  for kb in loaded.values():
    for image_id in sorted(kb.images):
      for t in kb.scene_triples(image_id):
        item(t)

  questions = []
  for split, kb in loaded.items():
    for q in kb.questions:
      where = f"{folder}/MMQA_{split}.jsonl qid {q.qid}"
      gold_triples = q.extra.get("gold_triples")
      instance = q.extra.get("instance_id")
      if not isinstance(gold_triples, list) or not isinstance(instance, str):
        raise EvidenceDataError(f"{where}: expected 'gold_triples' (list) and 'instance_id' (str)")
      local = kb.instance_facts(instance, hops=2)
      by_spo = {}
      for t in local:
        by_spo.setdefault(t.key(), t)  # scene triples come first: a scene wording wins
      gold = []
      for j, spo in enumerate(gold_triples):
        if tuple(spo) not in by_spo:
          raise EvidenceDataError(f"{where}: gold_triples[{j}] {spo} is not among the instance's "
                                  "scene or WordNet triples")
        gold.append(item(by_spo[tuple(spo)]))
      gold = list(dict.fromkeys(gold))
      entities = {x for spo in gold_triples for x in (spo[0], spo[2])}
      gold_set = set(gold)
      distractors = [i for t in local if t.subject in entities or t.object in entities
                     for i in [item(t)] if i not in gold_set]
      questions.append(EvidenceQuestion(q.qid, q.question, q.family, split, tuple(gold),
                                        tuple(dict.fromkeys(distractors))))
  n_img = sum(1 for m in modality if m == MODALITIES.index("image"))
  notes = [f"SceneKB ({folder}): pool of {n_img} distinct scene-triple wordings (image modality) "
           f"and {len(keys) - n_img} WordNet triples (text modality); benchmark splits."]
  return EvidenceSet("embedded", EvidencePool(keys, texts, np.asarray(modality, np.int32)),
                     questions, notes)


def from_config(g) -> EvidenceSet:
  """The evidence set a config's `grail` section names (`data` and the keys it reads)."""
  return load_evidence_set(g.data, mmqa_dir=g.mmqa_dir, embedded_dir=g.embedded_dir,
                           per_split=g.per_split, pathqa_dir=g.pathqa_dir,
                           pathqa_configs=g.pathqa_configs)


def load_pathqa(data: str, folder: str, configs: str) -> list:
  """The PathQuestion / WorldCup2014 datasets `configs` (comma-separated) from `folder`."""
  reader = PATH_READERS[data]
  names = [c.strip() for c in configs.split(",") if c.strip()]
  if not folder:
    raise ValueError(f"load_evidence_set({data!r}) needs pathqa_dir, the folder with the "
                     f"release's files (in the launchers: --config.grail.pathqa_dir=FOLDER)")
  if not names:
    raise ValueError(f"load_evidence_set({data!r}) needs pathqa_configs, a comma-separated list "
                     f"of {reader.NAMES} (--config.grail.pathqa_configs=...)")
  for n in names:
    if n not in reader.NAMES:
      raise ValueError(f"pathqa_configs={configs!r}: {n!r} is not one of {reader.NAMES}")
  return [reader.load(n, root=folder) for n in dict.fromkeys(names)]


def pathqa_evidence_set(datasets) -> EvidenceSet:
  """Answer paths of PathQuestion / WorldCup2014 datasets (`data.pathqa.PathQA`) as evidence
  sets over the union of their KBs (see the module docstring)."""
  keys, texts, index = [], [], {}

  def item(t) -> int:
    text = t.verbalize()
    if text not in index:
      index[text] = len(keys)
      keys.append("text:" + text)
      texts.append(text)
    return index[text]

  for ds in datasets:
    for t in ds.kb_triples():
      item(t)
  questions = []
  for ds in datasets:
    for q in ds.questions:
      gold = tuple(dict.fromkeys(item(t) for t in ds.gold_triples(q)))
      gold_set = set(gold)
      distractors = tuple(dict.fromkeys(i for t in ds.instance_triples(q)
                                        for i in [item(t)] if i not in gold_set))
      questions.append(EvidenceQuestion(q.qid, q.question, ds.name, q.split, gold, distractors))
  names = tuple(ds.name for ds in datasets)
  notes = [f"{'+'.join(names)}: pool of the {len(keys)} distinct facts of their KBs (text "
           "modality); gold = the answer path's hops; the last hop is hidden behind the earlier "
           "ones; splits by answer path."]
  modality = np.full(len(keys), MODALITIES.index("text"), np.int32)
  return EvidenceSet("+".join(names), EvidencePool(keys, texts, modality), questions, notes,
                     hide="last", macro_families=names)
