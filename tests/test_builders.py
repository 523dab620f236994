"""TFDS builders (array_record, no TensorFlow) built on committed fixtures in the official
formats (the embedded benchmark for scenekb), read back through tfds.data_source and grain, and
compared field by field with the source files."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from graphloom_jax.data import builders, mmqa, okvqa, scenekb
from graphloom_jax.graph.triples import iter_jsonl
from graphloom_jax.evaluation import answers

DATA = pathlib.Path(__file__).resolve().parent / "data"
MANUAL = {"mmqa": DATA / "mmqa", "scienceqa": DATA / "scienceqa", "okvqa": DATA / "okvqa"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("tfds")
  for name in ("scenekb", "mmqa/questions", "mmqa/texts", "mmqa/tables", "mmqa/images",
               "scienceqa", "okvqa"):
    builders.prepare(name, root, MANUAL.get(name.split("/")[0]))
  return root


def read_all(name, split, data_dir):
  return list(builders.grain_source(name, split, data_dir))


def jsonl(path):
  """Records of a JSON lines file; `x.jsonl` also finds `x.jsonl.gz` (the embedded SceneKB)."""
  path = pathlib.Path(path)
  return [r for _, r in iter_jsonl(mmqa.find_file(path.parent, path.name.removesuffix(".jsonl")))]


def test_registered_on_import(data_dir):
  assert {"scenekb", "mmqa", "scienceqa", "okvqa"} <= set(tfds.list_builders(with_community_datasets=False))
  assert isinstance(tfds.builder("scenekb", data_dir=data_dir), builders.SceneKB)
  b = tfds.builder("mmqa/tables", data_dir=data_dir)
  assert isinstance(b, builders.MMQA) and b.builder_config.name == "tables"
  # the files are array_record and a plain tfds.data_source reads them
  info = tfds.builder("okvqa", data_dir=data_dir).info
  assert info.file_format.value == "array_record"
  assert {s: v.num_examples for s, v in info.splits.items()} == {"train": 2, "val": 4}
  source = tfds.data_source("okvqa", split="val", data_dir=data_dir)
  assert int(source[0]["question_id"]) == 2971475


def test_scenekb_every_split_equals_source(data_dir):
  folder = scenekb.FOLDER
  images = {r["id"]: r for r in jsonl(folder / "MMQA_images.jsonl")}
  texts = {r["id"]: r for r in jsonl(folder / "MMQA_texts.jsonl")}
  for split in scenekb.SPLITS:
    source = jsonl(folder / f"MMQA_{split}.jsonl")
    records = read_all("scenekb", split, data_dir)
    assert len(records) == len(source) > 0
    for got, want in zip(records, source):
      assert got["qid"] == want["qid"] and got["question"] == want["question"]
      assert got["type"] == want["metadata"]["type"]
      assert got["family"] == want["metadata"]["family"]
      assert [a["answer"] for a in got["answers"]] == [a["answer"] for a in want["answers"]]
      assert got["options"] == want["options"] and got["answer_index"] == want["answer_index"]
      assert [[t["subject"], t["relation"], t["object"]] for t in got["gold_triples"]] == \
          want["gold_triples"]
      assert json.loads(got["metadata_json"]) == want["metadata"]
      assert got["instance_id"] == want["instance_id"]
      image = images[want["instance_id"]]
      graph = image["scene_graph"]
      assert [(o["object_id"], o["name"], o["box"].tolist()) for o in
              got["scene_graph"]["objects"]] == \
          [(o["object_id"], o["names"][0], [o["x"], o["y"], o["w"], o["h"]])
           for o in graph["objects"]]
      assert got["scene_graph"]["relationships"] == [
          {**{k: r[k] for k in ("relationship_id", "subject_id", "object_id", "predicate")},
           "confidence": float(np.float32(r["confidence"]))} for r in graph["relationships"]]
      assert got["scene_description"] == texts[image["description_id"]]["text"]


def test_mmqa_questions_and_documents_equal_source(data_dir):
  folder = MANUAL["mmqa"]
  b = tfds.builder("mmqa/questions", data_dir=data_dir)
  assert set(b.info.splits) == {"dev", "test"}  # the question files the folder has
  for split in ("dev", "test"):
    source = jsonl(folder / f"MMQA_{split}.jsonl")
    records = read_all("mmqa/questions", split, data_dir)
    assert [json.loads(r["record_json"]) for r in records] == source
    for got, want in zip(records, source):
      meta = want["metadata"]
      assert (got["qid"], got["question"], got["type"]) == \
          (want["qid"], want["question"], meta["type"])
      assert got["family"] == meta["type"].split("(")[0]
      assert [(a["answer"], a["modality"]) for a in got["answers"]] == \
          [(a["answer"], a["modality"]) for a in want.get("answers", [])]
      assert got["image_doc_ids"] == meta["image_doc_ids"]
      assert got["text_doc_ids"] == meta["text_doc_ids"]
      assert got["table_id"] == (meta.get("table_id") or "")
      assert got["supporting_context"] == want.get("supporting_context", [])
  dev = read_all("mmqa/questions", "dev", data_dir)
  assert [r["family"] for r in dev] == ["TableQ", "TextQ", "ImageQ", "Compose"]
  assert read_all("mmqa/questions", "test", data_dir)[0]["answers"] == []

  texts = read_all("mmqa/texts", "documents", data_dir)
  assert texts == jsonl(folder / "MMQA_texts.jsonl")
  assert texts[0]["text"][14:18] == "2000"  # the TextQ answer's start_byte
  tables = read_all("mmqa/tables", "documents", data_dir)
  for got, want in zip(tables, jsonl(folder / "MMQA_tables.jsonl"), strict=True):
    assert json.loads(got["table_json"]) == want["table"]
    assert got["header"] == [h["column_name"] for h in want["table"]["header"]]
    assert (got["id"], got["title"], got["table_name"]) == \
        (want["id"], want["title"], want["table"]["table_name"])
  # the TableQ answer sits at table_indices [6, 0]
  assert json.loads(tables[0]["table_json"])["table_rows"][6][0]["text"] == dev[0]["answers"][0][
      "answer"]
  assert read_all("mmqa/images", "documents", data_dir) == jsonl(folder / "MMQA_images.jsonl")


def test_scienceqa_equals_source_with_pixels(data_dir):
  folder = MANUAL["scienceqa"]
  problems = json.loads((folder / "problems.json").read_text())
  splits = json.loads((folder / "pid_splits.json").read_text())
  b = tfds.builder("scienceqa", data_dir=data_dir)
  assert set(b.info.splits) == {"train", "val", "test", "minitrain", "minival", "minitest"}
  for split in b.info.splits:
    records = read_all("scienceqa", split, data_dir)
    assert [r["pid"] for r in records] == splits[split]
    for got in records:
      want = problems[got["pid"]]
      for key in ("question", "choices", "answer", "task", "grade", "subject", "topic",
                  "category", "skill", "lecture", "solution", "split"):
        assert got[key] == want[key], (got["pid"], key)
      assert got["hint"] == want["hint"] and got["image_file"] == (want["image"] or "")
      if want["image"]:
        path = folder / "images" / want["split"] / got["pid"] / want["image"]
        np.testing.assert_array_equal(got["image"], np.asarray(Image.open(path).convert("RGB")))
      else:
        assert got["image"].shape == (0, 0, 3)
  test = read_all("scienceqa", "test", data_dir)
  assert test[0]["image"].shape == (5, 7, 3) and test[1]["image"].shape == (3, 4, 3)


def test_okvqa_equals_source_and_scores(data_dir):
  folder = MANUAL["okvqa"]
  for split in ("train", "val"):
    qs = json.loads((folder / okvqa.question_file(split)).read_text())["questions"]
    anns = {a["question_id"]: a for a in
            json.loads((folder / okvqa.annotation_file(split)).read_text())["annotations"]}
    records = read_all("okvqa", split, data_dir)
    assert [r["question_id"] for r in records] == [q["question_id"] for q in qs]
    for got, q in zip(records, qs):
      a = anns[q["question_id"]]
      assert (got["image_id"], got["question"]) == (q["image_id"], q["question"])
      assert got["answers"] == [x["answer"] for x in a["answers"]]
      assert got["raw_answers"] == [x["raw_answer"] for x in a["answers"]]
      assert got["answer_confidences"] == [x["answer_confidence"] for x in a["answers"]]
      assert (got["question_type"], got["answer_type"], got["confidence"]) == \
          (a["question_type"], a["answer_type"], a["confidence"])
      assert got["question_type_name"] == okvqa.QUESTION_TYPES[a["question_type"]]
      assert got["image_file"] == f"{split}2014/COCO_{split}2014_{q['image_id']:012d}.jpg"
  bird = read_all("okvqa", "val", data_dir)[1]
  # 6 x "pigeon": every leave-one-out subset has >= 5 -> 1.0
  assert answers.vqa_accuracy("Pigeon.", bird["answers"]) == 1.0
  # 2 x "dove": the 2 left out see 1 (1/3), the 8 others see 2 (2/3): (2/3 + 16/3) / 10 = 0.6
  assert answers.vqa_accuracy("a dove", bird["answers"]) == pytest.approx(0.6)
  teeth = read_all("okvqa", "val", data_dir)[2]
  assert answers.vqa_accuracy("four", teeth["answers"]) == 1.0  # "four" -> "4", 6 humans


def test_grain_shards_partition_the_split_and_shuffle_is_a_permutation(data_dir):
  full = [r["qid"] for r in read_all("scenekb", "test", data_dir)]
  shards = [[r["qid"] for r in builders.grain_source("scenekb", "test", data_dir,
                                                       shard_index=i, shard_count=3)]
            for i in range(3)]
  assert [q for i in range(3) for q in shards[i]] != full
  assert sorted(q for s in shards for q in s) == sorted(full)
  for i in range(3):
    assert shards[i] == full[i::3]
  shuffled = [r["qid"] for r in builders.grain_source("scenekb", "test", data_dir, seed=7)]
  again = [r["qid"] for r in builders.grain_source("scenekb", "test", data_dir, seed=7)]
  assert shuffled == again and shuffled != full and sorted(shuffled) == sorted(full)
  with pytest.raises(ValueError, match="shard_index 3 outside"):
    builders.grain_source("scenekb", "test", data_dir, shard_index=3, shard_count=3)


@pytest.mark.parametrize("name,message", [
    ("okvqa", "no OK-VQA question files"),
    ("scienceqa", "no problems.json"),
    ("mmqa/questions", "no MMQA_train/dev/test"),
    ("mmqa/texts", "no MMQA_texts"),
])
def test_missing_official_files_name_what_to_put_where(tmp_path, name, message):
  manual = tmp_path / "manual"
  manual.mkdir()
  # TFDS itself refuses an empty manual_dir, printing the builder's instructions
  with pytest.raises(AssertionError, match="manual_dir"):
    builders.prepare(name, tmp_path / "tfds", manual)
  (manual / "notes.txt").write_text("not the dataset")
  with pytest.raises(FileNotFoundError, match=message):
    builders.prepare(name, tmp_path / "tfds", manual)


def test_okvqa_reader_errors(tmp_path):
  for name in (okvqa.question_file("val"), okvqa.annotation_file("val")):
    (tmp_path / name).write_text((MANUAL["okvqa"] / name).read_text())
  anns = json.loads((tmp_path / okvqa.annotation_file("val")).read_text())
  anns["annotations"] = anns["annotations"][1:]
  (tmp_path / okvqa.annotation_file("val")).write_text(json.dumps(anns))
  with pytest.raises(okvqa.OKVQAFormatError, match="no annotation for it"):
    okvqa.load(tmp_path, "val")
  with pytest.raises(ValueError, match="unknown split 'test'"):
    okvqa.load(tmp_path, "test")
  with pytest.raises(FileNotFoundError, match="mscoco_train2014_annotations.json is missing"):
    okvqa.load(tmp_path, "train")


@pytest.fixture(scope="module")
def path_data_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("tfds_paths")
  for name in ("pathquestion/PQ-2H", "pathquestion/PQL-2H", "wc2014/WC-C", "wc2014/WC-M"):
    builders.prepare(name, root, DATA / name.split("/")[0])
  return root


@pytest.mark.parametrize("name,reader", [("pathquestion/PQ-2H", "pathquestion"),
                                         ("pathquestion/PQL-2H", "pathquestion"),
                                         ("wc2014/WC-C", "wc2014"), ("wc2014/WC-M", "wc2014")])
def test_path_datasets_read_back_equal_the_files(path_data_dir, name, reader):
  from graphloom_jax.data import pathqa, pathquestion, wc2014
  module = {"pathquestion": pathquestion, "wc2014": wc2014}[reader]
  config = name.split("/")[1]
  ds = module.load(config, root=DATA / reader)
  lines = (DATA / reader / module.FILES[config] if reader == "wc2014"
           else DATA / reader / module.FILES[config][0]).read_text().splitlines()
  info = tfds.builder(name, data_dir=path_data_dir).info
  assert set(info.splits) <= set(builders._pathqa.SPLITS)
  for protocol, prefix in (("path", ""), ("line", "line_")):
    seen = []
    for split in pathqa.SPLITS:
      want = ds.split(split, protocol)
      if not want:  # TFDS writes no empty split
        assert prefix + split not in info.splits
        continue
      records = read_all(name, prefix + split, path_data_dir)
      assert [r["qid"] for r in records] == [q.qid for q in want]
      for r, q in zip(records, want):
        fields = lines[q.line - 1].split("\t")
        assert r["raw_question"] == fields[0].strip() and r["question"] == q.question
        if reader == "pathquestion":  # answer(answer set/)
          assert fields[1] == f"{r['answer_ids'][0]}({'/'.join(r['answer_ids'])}/)"
        else:
          assert fields[1] == r["answer_ids"][0] and sorted(r["answer_ids"]) == \
              sorted(a for a in fields[3].split("/") if a)
        assert r["answers"] == list(q.answers) and r["hops"] == q.hops
        written = [p.split("#<end>#")[0] for p in fields[2].split("*")]
        assert r["paths"] == written
        assert [(f["subject"], f["relation"], f["object"]) for f in r["facts"]] == \
            [tuple(x.split("#")) for x in (fields[4].split("///") if reader == "wc2014" else [])]
        assert r["constraints"] == (fields[5].split("/") if config == "WC-C" else [])
      seen += [r["qid"] for r in records]
    assert sorted(seen) == sorted(q.qid for q in ds.questions)
  # the path split holds no path in two splits
  where = {}
  for split in set(pathqa.SPLITS) & set(info.splits):
    for r in read_all(name, split, path_data_dir):
      assert where.setdefault(tuple(r["paths"]), split) == split
