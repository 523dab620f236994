"""Hostile and careless inputs against the library and the launchers, each outcome classified.

  python benchmarks/robustness/probe_inputs.py [--launchers=false] [--output=benchmarks/robustness/probe_inputs.md]

Every probe either must fail (an error is required) or must work (a correct result is
required). Outcomes:
  clear error      the call raised a validation error (ValueError, TypeError, OSError, KeyError
                   from a lookup the caller asked for, a launcher's usage error) whose message
                   names the input: the file and line, the argument or the flag
  unclear error    a validation error that does not name the input
  silent wrong     no error where one is required, or a wrong result
  crash            an internal exception (IndexError, AttributeError, ZeroDivisionError,
                   RecursionError, a bare UnicodeDecodeError, ...) or a process killed by a
                   signal / a launcher traceback
  correct          a call that must work returned the right result

Classes: readers (triple files, scene graphs, WordNet, ConceptNet, VG150), loaders (decoder
checkpoints, conversion), generation arguments, launchers (subprocesses from outside the
repository), index operations, numerics (NaN where it must be refused or must not leak),
pipeline arguments. Prints per-class and total counts and every probe that was not a clear
error or correct behaviour.
"""

import collections
import gzip
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
flags.DEFINE_bool("launchers", True, "also probe the launchers (subprocesses, ~5 s each)")
flags.DEFINE_string("output", None, "write the counts as Markdown here")
FLAGS = flags.FLAGS

VALIDATION = (ValueError, TypeError, OSError, KeyError)
# Raised by our own checks as these types, but also what an unchecked bug raises.
INTERNAL = (IndexError, AttributeError, ZeroDivisionError, RecursionError, UnicodeDecodeError,
            AssertionError, NameError, UnboundLocalError, SystemError, OverflowError,
            MemoryError, StopIteration)
OUTCOMES = ("clear error", "unclear error", "silent wrong", "crash", "correct")


class Probes:
  """Collects (class, name, outcome, detail) rows."""

  def __init__(self):
    self.rows = []

  def _add(self, cls, name, outcome, detail=""):
    self.rows.append((cls, name, outcome, detail))

  def error(self, cls, name, fn, *names):
    """`fn()` must raise a validation error whose message contains one of `names`."""
    try:
      fn()
    except INTERNAL as e:
      self._add(cls, name, "crash", f"{type(e).__name__}: {e}"[:200])
      return
    except VALIDATION as e:
      msg = str(e)
      named = any(n.lower() in msg.lower() for n in names)
      self._add(cls, name, "clear error" if named else "unclear error",
                f"{type(e).__name__}: {msg}"[:200])
      return
    except Exception as e:  # noqa: BLE001  (a library's own error type: judged by its text)
      msg = str(e)
      named = any(n.lower() in msg.lower() for n in names)
      self._add(cls, name, "clear error" if named else "unclear error",
                f"{type(e).__name__}: {msg}"[:200])
      return
    self._add(cls, name, "silent wrong", "no error")

  def works(self, cls, name, fn, check):
    """`fn()` must return a value for which `check(value)` is true."""
    try:
      value = fn()
    except Exception as e:  # noqa: BLE001
      outcome = "crash" if isinstance(e, INTERNAL) else "unclear error"
      self._add(cls, name, outcome, f"{type(e).__name__}: {e}"[:200])
      return
    ok = bool(check(value))
    self._add(cls, name, "correct" if ok else "silent wrong", "" if ok else repr(value)[:200])

  def launcher(self, name, module, args, cwd, *names):
    """`python -m module args` from `cwd` must fail at once with a message naming the flag
    and without loading a model."""
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    out = proc.stdout + proc.stderr
    if proc.returncode < 0 or "Traceback" in out:
      self._add("launchers", name, "crash", out.strip().splitlines()[-1][:200])
    elif proc.returncode == 0 or "loaded in" in out or "trainable parameters" in out:
      self._add("launchers", name, "silent wrong", "ran (or loaded a model)")
    else:
      named = any(n in out for n in names)
      last = [l for l in out.splitlines() if l.strip()][-1:] or [""]
      self._add("launchers", name, "clear error" if named else "unclear error", last[0][:200])


# ------------------------------------------------------------------------------ probes

def probe_readers(p: Probes, tmp: pathlib.Path):
  from graphloom_jax.graph import kb
  from graphloom_jax.graph import scene_graph
  from graphloom_jax.graph import triples as T

  good = json.dumps({"subject": "cup", "relation": "on", "object": "table"})

  def write(name, data: bytes):
    path = tmp / name
    path.write_bytes(data)
    return path

  cases = {
      "non-UTF-8 line": b'{"subject": "caf\xe9", "relation": "r", "object": "o"}',
      "not JSON": b"{subject: cup}",
      "missing object": b'{"subject": "cup", "relation": "on"}',
      "NUL in a field": json.dumps({"subject": "c\x00p", "relation": "on",
                                    "object": "t"}).encode(),
      "newline in a field": json.dumps({"subject": "c\np", "relation": "on",
                                        "object": "t"}).encode(),
      "NaN confidence": b'{"subject": "cup", "relation": "on", "object": "t", '
                        b'"confidence": NaN}',
      "confidence 7": b'{"subject": "cup", "relation": "on", "object": "t", "confidence": 7}',
      "NaN region": b'{"subject": "a", "relation": "b", "object": "c", '
                    b'"provenance": {"region": [NaN, 0, 1, 1]}}',
      "deep nesting": b"[" * 100_000 + b"]" * 100_000,
      "list, not object": b"[1, 2, 3]",
      "empty subject": b'{"subject": " ", "relation": "on", "object": "t"}',
  }
  for what, line in cases.items():
    path = write("t.jsonl", good.encode() + b"\n" + line + b"\n")
    p.error("readers", f"triples JSONL: {what}", lambda: T.read_triples(path), "t.jsonl:2")
  path = write("t.jsonl", good.encode() + b"\n" + cases["not JSON"] + b"\n" + good.encode())
  p.works("readers", "triples JSONL lenient: bad line skipped, good kept",
          lambda: T.read_triples(path, strict=False),
          lambda r: len(r[0]) == 2 and r[1].skipped == 1)
  data = gzip.compress((good + "\n").encode() * 3000)
  path = write("t.jsonl.gz", data[:len(data) // 2])
  p.error("readers", "triples JSONL.gz truncated", lambda: T.read_triples(path), "t.jsonl.gz")
  path = write("t.jsonl.gz", b"not gzip at all")
  p.error("readers", "triples .gz not gzip", lambda: T.read_triples(path), "t.jsonl.gz")
  path = write("t.json", b"[" + good.encode() + b",\n{\"subject\": \"\xff\"}]")
  p.error("readers", "triples JSON non-UTF-8", lambda: T.read_triples(path), "t.json:2")
  path = write("t.txt", good.encode())
  p.error("readers", "triples file of unknown type", lambda: T.read_triples(path), "t.txt")
  p.error("readers", "triples file missing", lambda: T.read_triples(tmp / "nope.jsonl"),
          "nope.jsonl")
  path = write("empty.jsonl", b"")
  p.works("readers", "triples JSONL empty file", lambda: T.read_triples(path),
          lambda r: r[0] == [] and r[1].skipped == 0)
  path = write("sg.json", b'[{"image_id": 1, "objects": [{"object_id": 1}], '
                          b'"relationships": [{"subject_id": 1, "object_id": 9, '
                          b'"predicate": "on"}]}]')
  p.error("readers", "scene graph: relation to a missing object",
          lambda: scene_graph.read_scene_graphs(path), "sg.json")
  path = write("sg.json", b'{"relationships": "none"}')
  p.error("readers", "scene graph: not a list", lambda: scene_graph.read_scene_graphs(path),
          "sg.json")

  cn_good = '/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{"weight": 2.0}'
  cn_cases = {
      "NaN weight": '/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{"weight": NaN}',
      "negative weight": '/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{"weight": -1}',
      "4 columns": "/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal",
      "bad concept URI": '/a/[x]\t/r/IsA\tdog\t/c/en/animal\t{"weight": 1}',
      "bad JSON column": "/a/[x]\t/r/IsA\t/c/en/dog\t/c/en/animal\t{weight}",
      "huge line": "/a/[x]\t/r/IsA\t/c/en/" + "d" * (getattr(kb, "MAX_LINE_BYTES", 1 << 20) + 10)
                   + '\t/c/en/animal\t{"weight": 1}',
  }
  for what, line in cn_cases.items():
    path = write("cn.csv", (cn_good + "\n" + line + "\n").encode())
    p.error("readers", f"ConceptNet: {what}", lambda: kb.load_conceptnet(path), "cn.csv:2")
  path = write("cn.csv", (cn_good + "\n").encode()
               + b"/a/[x]\t/r/IsA\t/c/en/caf\xe9\t/c/en/a\t{}\n")
  p.error("readers", "ConceptNet: non-UTF-8", lambda: kb.load_conceptnet(path), "cn.csv:2")
  p.works("readers", "ConceptNet lenient: bad line counted",
          lambda: kb.load_conceptnet(path, strict=False),
          lambda r: len(r[0]) == 1 and r[1].skipped == 1)

  wn = tmp / "wn"
  wn.mkdir()
  (wn / "index.noun").write_text("entity n 1 0 1 0 00001740  \n")
  for what, line in {"no gloss bar": b"00001740 03 n 01 entity 0 000 no gloss",
                     "no words": b"00001740 03 n 00 0 000 | x",
                     "non-UTF-8": b"00001740 03 n 01 ent\xffity 0 000 | x",
                     "pointer cut short": b"00001740 03 n 01 entity 0 002 @ 1 n 0000 | x"}.items():
    (wn / "data.noun").write_bytes(line + b"\n")
    p.error("readers", f"WordNet data line: {what}", lambda: kb.WordNet.load(wn), "data.noun:1")
  (wn / "data.noun").write_text("00001740 03 n 01 entity 0 000 | that which is\n")
  p.works("readers", "WordNet minimal files load", lambda: kb.WordNet.load(wn),
          lambda w: [s.head for s in w.senses("entity")] == ["entity"])
  path = write("vocab.json", b'{"objects": "abc", "predicates": ["on"]}')
  p.error("readers", "VG150 vocab: objects a string", lambda: kb.load_vg150_vocab(path),
          "vocab.json")


HF_CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=16,
                 hidden_size=8, intermediate_size=12, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                 tie_word_embeddings=True)


def _hf_folder(folder: pathlib.Path, config=None, nan=False, int_tensor=False):
  from safetensors.numpy import save_file

  from graphloom_jax.models import llama, weights

  folder.mkdir(parents=True)
  cfg = dict(HF_CONFIG, **(config or {}))
  (folder / "config.json").write_text(json.dumps(cfg))
  shapes = weights._hf_expected_shapes(llama.LlamaConfig.from_hf(HF_CONFIG))
  rng = np.random.default_rng(0)
  tensors = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
  name = sorted(tensors)[0]
  if nan:
    tensors[name].flat[0] = np.nan
  if int_tensor:
    tensors[name] = tensors[name].astype(np.int32)
  save_file(tensors, str(folder / "model.safetensors"))
  return folder


def probe_loaders(p: Probes, tmp: pathlib.Path):
  from graphloom_jax.models import decoder as decoder_lib
  from graphloom_jax.models import weights

  for what, cfg in {"vocab_size 300.7": {"vocab_size": 300.7}, "rope_theta 0": {"rope_theta": 0},
                    "rms_norm_eps -1": {"rms_norm_eps": -1},
                    "max_position_embeddings 0": {"max_position_embeddings": 0}}.items():
    key = next(iter(cfg))
    folder = _hf_folder(tmp / f"cfg_{key}", cfg)
    p.error("loaders", f"config {what}", lambda: weights.load(folder), key)
  folder = _hf_folder(tmp / "notobj")
  (folder / "config.json").write_text("[1, 2]")
  p.error("loaders", "config not a JSON object", lambda: weights.load(folder), "config.json")
  folder = _hf_folder(tmp / "inttensor", int_tensor=True)
  p.error("loaders", "integer tensor where floats belong", lambda: weights.load(folder),
          "int", "float")
  folder = _hf_folder(tmp / "both")
  (folder / "model.Q4.gguf").write_bytes(b"GGUF")
  p.error("loaders", "safetensors and GGUF in one folder", lambda: weights.load(folder),
          "ambiguous")
  loop = tmp / "loop"
  os.symlink(loop, loop)
  p.error("loaders", "symlink loop", lambda: weights.load(loop), "loop")
  p.error("loaders", "missing path", lambda: decoder_lib.load_decoder(tmp / "nothing"),
          "nothing")
  folder = _hf_folder(tmp / "nan", nan=True)
  out = tmp / "nan_out"
  p.error("loaders", "convert NaN weights", lambda: decoder_lib.convert_to_orbax(folder, out),
          "NaN")
  p.works("loaders", "convert NaN weights wrote nothing", lambda: out.exists(),
          lambda exists: not exists)
  folder = _hf_folder(tmp / "good")
  p.works("loaders", "convert good weights round-trips",
          lambda: weights.load_orbax(decoder_lib.convert_to_orbax(folder, tmp / "good_out")),
          lambda r: weights.is_orbax(tmp / "good_out"))
  (tmp / "full").mkdir()
  (tmp / "full" / "x").write_text("keep")
  p.error("loaders", "convert into a non-empty folder",
          lambda: decoder_lib.convert_to_orbax(folder, tmp / "full"), "not empty")
  folder = _hf_folder(tmp / "outside")
  (folder / "model.safetensors.index.json").write_text(json.dumps(
      {"weight_map": {"model.embed_tokens.weight": "../../etc/passwd"}}))
  p.error("loaders", "weight_map entry outside the folder", lambda: weights.load(folder),
          "outside", "weight_map")


def probe_generation(p: Probes):
  from graphloom_jax.configs import tiny
  from graphloom_jax.models import decoder as decoder_lib
  from graphloom_jax.models import llama

  cfg = llama.config_from_arch(tiny.get_config().model.arch)
  dec = decoder_lib.random_decoder(cfg, max_seq_len=128)
  ids = [[3, 5, 7]]
  for what, kwargs, name in [
      ("temperature -1", dict(temperature=-1.0), "temperature"),
      ("temperature NaN", dict(temperature=math.nan), "temperature"),
      ("temperature inf", dict(temperature=math.inf), "temperature"),
      ("temperature '0.7'", dict(temperature="0.7"), "temperature"),
      ("top_p 0", dict(temperature=1.0, top_p=0.0), "top_p"),
      ("top_p 1.5", dict(temperature=1.0, top_p=1.5), "top_p"),
      ("top_p NaN", dict(temperature=1.0, top_p=math.nan), "top_p"),
      ("seed -1", dict(temperature=1.0, seed=-1), "seed"),
      ("seed 2**64", dict(temperature=1.0, seed=2**64), "seed"),
      ("seed 1.5", dict(temperature=1.0, seed=1.5), "seed"),
      ("eos_ids floats", dict(eos_ids=[1.5]), "eos_ids")]:
    p.error("generation", what, lambda: dec.generate_ids(ids, 4, **kwargs), name)
  for what, n in [("max_new_tokens 0", 0), ("max_new_tokens 2.5", 2.5),
                  ("max_new_tokens True", True), ("max_new_tokens '4'", "4")]:
    p.error("generation", what, lambda: dec.generate_ids(ids, n), "max_new_tokens")
  for what, rows, name in [("token id 3.7", [[3.7]], "token id"),
                           ("token id True", [[True, 2]], "token id"),
                           ("token id 10**6", [[10**6]], "out of range"),
                           ("token id -1", [[-1]], "out of range"),
                           ("prompt ids a string", "abc", "prompt_ids"),
                           ("empty prompt", [[]], "empty"),
                           ("no prompts", [], "no prompts")]:
    p.error("generation", what, lambda: dec.generate_ids(rows, 4), name)
  p.error("generation", "prompt too long for the context",
          lambda: dec.generate_ids([[3] * 126], 4), "exceeds the context")
  p.error("generation", "max_seq_len 0", lambda: decoder_lib.random_decoder(cfg, max_seq_len=0),
          "max_seq_len")
  p.error("generation", "max_seq_len -5",
          lambda: decoder_lib.random_decoder(cfg, max_seq_len=-5), "max_seq_len")
  from graphloom_jax.pipeline.prompts import ByteTokenizer
  tdec = decoder_lib.Decoder(dec.model, ByteTokenizer(cfg.vocab_size), max_seq_len=128)
  p.error("generation", "non-string prompt", lambda: tdec.generate(["hi", 7], 4, chat=False),
          "prompt 1")
  p.error("generation", "a single string as prompts", lambda: tdec.generate("hi", 4), "string")
  p.works("generation", "sampling differs by seed",
          lambda: [dec.generate_ids(ids, 12, temperature=5.0, seed=s, eos_ids=[-1])
                   for s in (1, 2)], lambda r: r[0] != r[1])
  p.works("generation", "greedy is deterministic",
          lambda: [dec.generate_ids(ids, 6, eos_ids=[-1]) for _ in range(2)],
          lambda r: r[0] == r[1] and len(r[0][0]) == 6)


def probe_launchers(p: Probes, tmp: pathlib.Path):
  (tmp / "empty.jsonl").write_text("")
  (tmp / "a_file").write_text("x")
  cases = [
      ("answer --num_examples=0", "launch.answer", ["--num_examples=0"], "--num_examples"),
      ("answer --triples_file without --question", "launch.answer",
       ["--triples_file=empty.jsonl"], "--triples_file"),
      ("answer missing triples file", "launch.answer",
       ["--question=Why?", "--triples_file=missing.jsonl"], "--triples_file=missing.jsonl"),
      ("answer empty triples file", "launch.answer",
       ["--question=Why?", "--triples_file=empty.jsonl"], "--triples_file=empty.jsonl"),
      ("answer --config missing", "launch.answer", ["--config=configs/none.py"], "none.py"),
      ("train workdir is a file", "launch.train", ["--workdir=a_file"], "--workdir"),
      ("train num_steps 0", "launch.train", ["--workdir=w", "--config.train.num_steps=0"],
       "num_steps"),
      ("convert missing weights", "launch.convert", ["--weights=missing", "--workdir=o"],
       "--weights"),
      ("generate temperature -1", "launch.generate", ["--prompt=Hi", "--temperature=-1"],
       "--temperature"),
      ("generate top_p 0", "launch.generate", ["--prompt=Hi", "--top_p=0"], "--top_p"),
      ("retrieve num_examples -1", "launch.retrieve", ["--num_examples=-1"],
       "--num_examples"),
      ("evaluate_retrieval budgets x", "launch.evaluate_retrieval",
       ["--task=sequential_pool", "--workdir=o", "--budgets=x"], "--budgets"),
      ("train_grail workdir a file", "launch.train_grail", ["--workdir=a_file"], "--workdir"),
  ]
  for name, module, args, flag in cases:
    p.launcher(name, module, args, tmp, flag)


def probe_index(p: Probes, tmp: pathlib.Path):
  from graphloom_jax.retrieval import index

  rng = np.random.default_rng(0)
  vectors = rng.standard_normal((50, 8)).astype(np.float32)

  def fresh():
    return index.ExactIndex(vectors, np.arange(50))

  p.error("index", "delete repeated ids", lambda: fresh().delete([3, 3]), "duplicate")
  p.error("index", "delete float ids", lambda: fresh().delete([1.5]), "integer")
  p.error("index", "delete bool ids", lambda: fresh().delete([True]), "integer", "bool")
  p.error("index", "delete unknown id", lambda: fresh().delete([999]), "999")
  idx = fresh()
  try:
    idx.delete([3, 3])
  except Exception:  # noqa: BLE001
    pass
  p.works("index", "a refused delete changes nothing", lambda: len(idx), lambda n: n == 50)
  p.error("index", "search k=True", lambda: fresh().search(vectors[:1], True), "k")
  p.error("index", "search k=0", lambda: fresh().search(vectors[:1], 0), "k")
  p.error("index", "search k beyond size", lambda: fresh().search(vectors[:1], 51), "k=51")
  p.error("index", "upsert NaN vector",
          lambda: fresh().upsert([100], np.full((1, 8), np.nan, np.float32)), "non-finite")
  p.error("index", "upsert wrong dimension",
          lambda: fresh().upsert([100], np.ones((1, 4), np.float32)), "dimension")
  p.error("index", "build with duplicate ids",
          lambda: index.ExactIndex(vectors[:2], np.array([1, 1])), "duplicate")
  folder = tmp / "idx"
  fresh().save(folder)
  (folder / index.IDS_FILE).unlink()
  p.error("index", "load without ids", lambda: index.load_index(folder), "ids")
  fresh().save(folder)
  meta = json.loads((folder / index.INDEX_FILE).read_text())
  (folder / index.INDEX_FILE).write_text(json.dumps({**meta, "chunk": 0}))
  p.error("index", "load with chunk=0", lambda: index.load_index(folder), "chunk")
  (folder / index.INDEX_FILE).write_text(json.dumps({k: v for k, v in meta.items()
                                                    if k != "count"}))
  p.error("index", "load without count", lambda: index.load_index(folder), "count")
  p.error("index", "load a missing folder", lambda: index.load_index(tmp / "none"), "none")
  (tmp / "other").mkdir()
  (tmp / "other" / "mine.txt").write_text("keep")
  p.error("index", "save over a folder of other files", lambda: fresh().save(tmp / "other"),
          "other")
  idx = fresh()
  idx.delete([7])
  p.works("index", "deleted id never returned", lambda: idx.search(vectors[7:8], 5)[0],
          lambda ids: 7 not in np.asarray(ids).ravel().tolist())
  idx.save(tmp / "roundtrip")
  p.works("index", "save/load round trip", lambda: index.load_index(tmp / "roundtrip"),
          lambda got: np.array_equal(np.asarray(got.ids), np.asarray(idx.ids)))


def probe_numerics(p: Probes):
  import jax.numpy as jnp
  from flax import nnx

  from graphloom_jax.evaluation import calibration
  from graphloom_jax.models import router as router_lib
  from graphloom_jax.models import slots
  from graphloom_jax.ops import joint_attention as ja

  rng = np.random.default_rng(0)
  triples = [dict(subject="cup", relation="on", object="table", score=0.9, conf_ext=0.8,
                  centrality=0.5)]

  def nan_embed(texts):
    out = np.ones((len(texts), 4), np.float32)
    out[0, 0] = np.nan
    return out

  p.error("numerics", "NaN embedding in a slot bank",
          lambda: slots.build_bank(triples, nan_embed, 2), "triple 0")
  p.error("numerics", "NaN triple score in a slot bank",
          lambda: slots.build_bank([dict(triples[0], score=math.nan)],
                                   lambda t: np.ones((len(t), 4), np.float32), 2), "score")
  router = router_lib.Router(4, 3, 5, rngs=nnx.Rngs(0))
  rel = rng.uniform(0.1, 0.9, (2, 3)).astype(np.float32)
  rel[1, 2] = np.nan
  p.error("numerics", "NaN reliability in a calibration fit",
          lambda: router.fit_calibration(jnp.asarray(rel), jnp.ones((2, 3)),
                                         jnp.ones((2, 3), bool)), "reliability")
  p.error("numerics", "NaN probability in ECE",
          lambda: calibration.ece(np.array([0.5, np.nan]), np.array([1, 0])), "probability")
  q = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)
  k = rng.standard_normal((1, 3, 1, 4)).astype(np.float32)
  valid = np.array([[True, True, False]])
  dirty = k.copy()
  dirty[:, 2] = np.nan
  p.works("numerics", "NaN in masked-out keys/values stays out",
          lambda: (ja.partial_attention(q, dirty, dirty, valid)[0],
                   ja.partial_attention(q, k, k, valid)[0]),
          lambda r: (np.isfinite(np.asarray(r[0])).all()
                     and np.allclose(r[0], r[1], atol=1e-6)))


def probe_pipeline(p: Probes):
  from graphloom_jax.pipeline.arguments import check_answer_args

  t = [{"subject": "horse", "relation": "on", "object": "grass"}]
  for what, kwargs, name in [
      ("question not a string", dict(questions=[3]), "question 0"),
      ("questions a single string", dict(questions="Why?"), "questions"),
      ("options a single string", dict(options=["yes,no"]), "options of question 0"),
      ("options holding a number", dict(options=[["a", 1]]), "options of question 0"),
      ("objects a single string", dict(objects=["horse"]), "objects of question 0"),
      ("triples a path string", dict(triples=["scene.jsonl"]), "triples of question 0")]:
    args = dict(questions=["Why?"], triples=[t], objects=None, options=None, mode="graphloom")
    args.update(kwargs)
    qs, ts = args.pop("questions"), args.pop("triples")
    p.error("pipeline", what, lambda: check_answer_args(qs, ts, **args), name)


def markdown(rows, load) -> str:
  classes = sorted({r[0] for r in rows}, key=[r[0] for r in rows].index)
  counts = {c: collections.Counter(r[2] for r in rows if r[0] == c) for c in classes}
  total = collections.Counter(r[2] for r in rows)
  head = "| class | probes | " + " | ".join(OUTCOMES) + " |"
  lines = [head, "|" + "---|" * (len(OUTCOMES) + 2)]
  for c in classes:
    lines.append(f"| {c} | {sum(counts[c].values())} | "
                 + " | ".join(str(counts[c][o]) for o in OUTCOMES) + " |")
  lines.append(f"| **all** | {len(rows)} | " + " | ".join(str(total[o]) for o in OUTCOMES)
               + " |")
  others = [r for r in rows if r[2] not in ("clear error", "correct")]
  text = "\n".join(lines)
  if others:
    text += "\n\nNot a clear error or correct behaviour:\n" + "\n".join(
        f"- {c}: {n}: **{o}** ({d})" for c, n, o, d in others)
  return text


def main(argv):
  del argv
  import logging
  logging.getLogger("absl").setLevel(logging.ERROR)
  p = Probes()
  load_before = os.getloadavg()
  with tempfile.TemporaryDirectory(prefix="probes_") as tmp:
    tmp = pathlib.Path(tmp)
    for name, fn in (("readers", lambda d: probe_readers(p, d)),
                     ("loaders", lambda d: probe_loaders(p, d)),
                     ("generation", lambda d: probe_generation(p)),
                     ("index", lambda d: probe_index(p, d)),
                     ("numerics", lambda d: probe_numerics(p)),
                     ("pipeline", lambda d: probe_pipeline(p))):
      (tmp / name).mkdir()
      try:
        fn(tmp / name)
      except ImportError as e:  # an older tree without a module the probes use
        print(f"{name}: probes skipped ({e})")
    if FLAGS.launchers:
      (tmp / "launchers").mkdir()
      probe_launchers(p, tmp / "launchers")
  text = markdown(p.rows, load_before)
  print(text)
  if FLAGS.output:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    pathlib.Path(FLAGS.output).write_text(
        "# Hostile and careless inputs: probe counts\n\n"
        f"`python benchmarks/robustness/probe_inputs.py` ({len(p.rows)} probes; load average at the "
        f"start {' '.join(f'{x:.2f}' for x in load_before)}, `uptime` at the end: {uptime}). "
        "Outcome classes as in the script's docstring.\n\n" + text + "\n\nEvery probe:\n\n"
        + "\n".join(f"- {c} / {n}: {o}" for c, n, o, _ in p.rows) + "\n")
  bad = sum(r[2] in ("silent wrong", "crash") for r in p.rows)
  return 1 if bad else 0


if __name__ == "__main__":
  app.run(main)
