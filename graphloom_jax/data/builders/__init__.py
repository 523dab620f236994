"""TFDS builders for the datasets the paper evaluates on, written as array_record files (no
TensorFlow at run time) and read back through grain.

Importing this package registers them, so `tfds.builder(name)` finds them:
  scenekb            the embedded benchmark (graphloom_jax.data.scenekb), every split, with each
                     question's scene graph, scene description and gold triples
  mmqa/questions     the official MMQA question files in manual_dir (each MMQA_<split>.jsonl(.gz)
                     there is a split); mmqa/texts, mmqa/tables, mmqa/images: its documents
                     (one split, "documents")
  scienceqa          ScienceQA's problems.json + pid_splits.json (+ images/) in manual_dir
  okvqa              OK-VQA's question and annotation files in manual_dir (train, val)
  pathquestion/PQ-3H PathQuestion's release files in manual_dir (configs PQ-2H, PQ-3H, PQL-2H,
                     PQL-3H); splits by answer path (train, validation, test) and the published
                     random split by line (line_train, line_validation, line_test)
  wc2014/WC-2H       WorldCup2014's release files (configs WC-1H, WC-2H, WC-M, WC-C), the same
                     splits

  from graphloom_jax.data import builders
  ds = builders.grain_source("okvqa", "val", data_dir, manual_dir=folder)   # grain.MapDataset
  ds[0]["question"], len(ds)

Nested lists that TFDS can only store with TensorFlow (table rows, intermediate answers, answer
instances) are kept as JSON text in `*_json` fields. Records keep the source order (keyed by
position, `disable_shuffling`), so index i of a split is record i of its source file.
"""

from __future__ import annotations

import grain
import numpy as np
import tensorflow_datasets as tfds

from graphloom_jax.data.builders import mmqa as _mmqa
from graphloom_jax.data.builders import okvqa as _okvqa
from graphloom_jax.data.builders import pathqa as _pathqa
from graphloom_jax.data.builders import scenekb as _scenekb
from graphloom_jax.data.builders import scienceqa as _scienceqa

SceneKB = _scenekb.SceneKB
MMQA = _mmqa.MMQA
ScienceQA = _scienceqa.ScienceQA
OKVQA = _okvqa.OKVQA
PathQuestion = _pathqa.PathQuestion
WC2014 = _pathqa.WC2014
NAMES = ("scenekb", "mmqa", "scienceqa", "okvqa", "pathquestion", "wc2014")


def prepare(name: str, data_dir, manual_dir=None) -> tfds.core.DatasetBuilder:
  """The builder `name` ("mmqa/texts" picks a config), its files written under data_dir unless
  they are there already; manual_dir holds the official files for mmqa, scienceqa, okvqa,
  pathquestion and wc2014."""
  builder = tfds.builder(name, data_dir=str(data_dir), file_format="array_record")
  config = tfds.download.DownloadConfig(manual_dir=None if manual_dir is None else str(manual_dir))
  builder.download_and_prepare(download_config=config)
  return builder


def _decode(feature, value):
  if isinstance(feature, tfds.features.FeaturesDict):
    return {k: _decode(feature[k], value[k]) for k in feature.keys()}
  if isinstance(feature, tfds.features.Sequence):
    inner = feature.feature
    if isinstance(inner, tfds.features.FeaturesDict):  # stored as a dict of equal-length lists
      n = len(value[next(iter(inner.keys()))])
      return [{k: _decode(inner[k], value[k][i]) for k in inner.keys()} for i in range(n)]
    return [_decode(inner, v) for v in value]
  if isinstance(feature, tfds.features.Text):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
  value = np.asarray(value)
  return value.item() if value.ndim == 0 else value


def decoder(builder: tfds.core.DatasetBuilder):
  """record (numpy, bytes) -> plain Python: str for text, lists of dicts for sequences of
  records, Python scalars; arrays (pixels, boxes) stay numpy."""
  features = builder.info.features
  return lambda record: _decode(features, record)


def grain_source(name: str, split: str, data_dir, *, manual_dir=None, shard_index: int = 0,
                 shard_count: int = 1, seed: int | None = None) -> grain.MapDataset:
  """A split as a grain.MapDataset of decoded records, prepared first when needed.

  shard_index / shard_count keep every shard_count-th record from shard_index (one process's
  share of an evaluation); seed shuffles (after sharding) when given.
  """
  if not 0 <= shard_index < shard_count:
    raise ValueError(f"grain_source: shard_index {shard_index} outside [0, {shard_count})")
  builder = prepare(name, data_dir, manual_dir)
  ds = grain.MapDataset.source(builder.as_data_source(split=split))
  ds = ds[shard_index::shard_count].map(decoder(builder))
  return ds if seed is None else ds.shuffle(seed=seed)
