"""GraphLoom end to end on the tiny config (random decoder, random heads, hashed embeddings):
provenance, timings, shared featurisation, verification + one revision, heads checkpoints and
bad input."""

import json
import math

import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import heads as heads_lib
from graphloom_jax.pipeline import STAGES, GraphLoom, graphloom, load_heads, save_heads
from graphloom_jax.training import data

from fakes import HashEmbed


class StubVerifier:
  """Entailment probabilities from a fixed list, one call at a time; records the calls."""

  def __init__(self, probabilities):
    self.probabilities = list(probabilities)
    self.calls = []

  def entailment(self, premise, hypotheses):
    self.calls.append((premise, list(hypotheses)))
    return np.full(len(hypotheses), self.probabilities.pop(0))


@pytest.fixture(scope="module")
def parts():
  cfg = tiny.get_config()
  dec = decoder_lib.from_config(cfg.model)
  kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  heads = graphloom.new_heads(cfg, dec, 16, seed=3)
  return cfg, dec, kb, heads


def _system(parts, **kwargs):
  cfg, dec, kb, heads = parts
  return GraphLoom(cfg, dec, HashEmbed(), heads, kb_sources=[kb.kb_source()], **kwargs)


def test_answers_cite_instance_graph_triples_with_sources(parts):
  cfg, _, kb, _ = parts
  system = _system(parts)
  qs = kb.questions[:3]
  graphs = [system.instance_graph(kb.scene_graph(q.extra["instance_id"]),
                                  instance_id=q.extra["instance_id"]) for q in qs]
  answers = system.answer_batch([q.question for q in qs], graphs,
                                options=[q.extra["options"] for q in qs])
  for q, g, a in zip(qs, graphs, answers):
    assert set(STAGES) <= set(a.timings) and all(v >= 0 for v in a.timings.values())
    assert a.choice == int(np.argmax(a.option_scores)) and len(a.option_scores) == 4
    assert a.evidence, "a random router still routes slots whose gates pass epsilon"
    for c in a.evidence:
      assert g.has(c.triple) and c.triple in a.retrieved
      assert cfg.router.epsilon <= c.gate <= 1.0
      src = c.to_json()
      assert src["source"] == c.triple.source and src["instance"] == q.extra["instance_id"]
      if c.triple.source == "scene":
        assert src["box"] and src["ref"].startswith("relationship ")
    assert [c.gate for c in a.evidence] == sorted((c.gate for c in a.evidence), reverse=True)
    assert a.to_json()["evidence"][0]["subject"] == a.evidence[0].triple.subject


def test_training_features_are_the_slots_answer_routes_over(parts):
  """featurize (training) and GraphLoom.answer build the same slot bank for a question."""
  cfg, _, kb, _ = parts
  system = _system(parts)
  q = kb.questions[5]
  feats = data.featurize(system, kb, [q], cfg.train.seq_len)
  prepared = system.prepare([q.question], [kb.scene_graph(q.extra["instance_id"])])[0]
  for key in ("slot_keys", "slot_values", "slot_valid", "slot_features", "slot_reliability",
              "slot_key_tokens", "slot_value_tokens", "evidence", "image", "question_emb"):
    np.testing.assert_array_equal(feats[key][0], prepared.evidence.arrays[key], err_msg=key)
  answer = system.answer(q.question, kb.scene_graph(q.extra["instance_id"]))
  n = cfg.memory.bank_size // 2
  routed_over = {t.key() for t in answer.retrieved[:n]}
  index = feats["slot_triple"][0][feats["slot_valid"][0]]
  assert {prepared.evidence.triples[i].key() for i in index} == routed_over
  # the slot keys are the embeddings of the triples' subjects and relations
  t0 = prepared.evidence.triples[0]
  np.testing.assert_allclose(feats["slot_keys"][0][0], HashEmbed().embed([t0.subject])[0])
  np.testing.assert_allclose(feats["slot_keys"][0][n], HashEmbed().embed([t0.relation])[0])
  # utility labels come from the gold triples, and only at training time
  gold = {tuple(g) for g in q.extra["gold_triples"]}
  want = [float(prepared.evidence.triples[i].key() in gold) for i in index]
  np.testing.assert_array_equal(feats["slot_utility"][0][feats["slot_valid"][0]], want)


def test_failed_claim_triggers_exactly_one_revision(parts):
  _, dec, kb, _ = parts
  q = kb.questions[0]
  calls = []
  original = dec.generate_ids

  def counting(*args, **kwargs):
    calls.append(args[0])
    return original(*args, **kwargs)

  verifier = StubVerifier([0.1, 0.2])  # the first answer fails, the revision fails too
  system = _system(parts, verifier=verifier)
  system.decoder.generate_ids = counting
  try:
    a = system.answer(q.question, kb.scene_graph(q.extra["instance_id"]))
  finally:
    del system.decoder.generate_ids
  assert a.revised and a.first_text is not None
  assert len(calls) == 2 and len(verifier.calls) == 2  # answer + one revision, never more
  assert not a.supported and a.claims[0].probability == pytest.approx(0.2)
  premise = verifier.calls[0][0].split("\n")
  assert len(premise) <= system.config.verify.max_evidence
  assert set(premise) <= {t.verbalize() for t in a.retrieved}
  # the revision prompt lists only the verified evidence
  revision_text = system.fmt.tok.decode(calls[1][0])
  assert all(line in revision_text for line in premise)

  ok = _system(parts, verifier=StubVerifier([0.9]))
  b = ok.answer(q.question, kb.scene_graph(q.extra["instance_id"]))
  assert not b.revised and b.supported and b.timings["revision"] == 0.0

  # a revision the verifier supports less does not replace the answer (but is reported)
  worse = _system(parts, verifier=StubVerifier([0.5, 0.2]))
  c = worse.answer(q.question, kb.scene_graph(q.extra["instance_id"]))
  assert not c.revised and c.revision_text is not None and c.text == c.first_text
  assert c.claims[0].probability == pytest.approx(0.5)


def test_no_retrieval_mode_needs_no_triples(parts):
  system = _system(parts, verifier=StubVerifier([0.5]))
  a = system.answer("What is on the table?", [], mode="no_retrieval", options=["cup", "dog"])
  assert a.evidence == [] and a.retrieved == [] and a.choice in (0, 1) and not a.revised


def test_bad_input_is_a_clear_error(parts):
  _, _, kb, _ = parts
  system = _system(parts, verifier=StubVerifier([0.5] * 8))
  graph = kb.scene_graph(kb.questions[0].extra["instance_id"])
  with pytest.raises(ValueError, match="question 0 is empty"):
    system.answer("  ", graph)
  with pytest.raises(ValueError, match="no triples given"):
    system.answer("What?", [])
  with pytest.raises(ValueError, match="mode='rag'"):
    system.answer("What?", graph, mode="rag")
  with pytest.raises(ValueError, match="option 1 is empty"):
    system.answer("What?", graph, options=["cup", ""])
  with pytest.raises(ValueError, match="confidence"):
    system.answer("What?", [{"subject": "cup", "relation": "on", "object": "table",
                             "confidence": math.nan}])
  with pytest.raises(ValueError, match="confidence"):
    system.answer("What?", [{"subject": "cup", "relation": "on", "object": "table",
                             "confidence": 1.5}])
  with pytest.raises(TypeError, match="expected a Triple"):
    system.answer("What?", [("cup", "on", "table")])


def test_failing_verifier_and_writer_fail_loudly(parts):
  _, _, kb, _ = parts
  q = kb.questions[0]

  class Broken:
    def entailment(self, premise, hypotheses):
      raise OSError("judge crashed")

  with pytest.raises(RuntimeError, match="verification of question .* Broken failed .*judge crashed"):
    _system(parts, verifier=Broken()).answer(q.question, kb.scene_graph(q.extra["instance_id"]))

  def writer(ctx):
    raise OSError("writer crashed")

  system = _system(parts, verifier=StubVerifier([0.5]), writer=writer)
  with pytest.raises(OSError, match="writer crashed"):
    system.answer(q.question, kb.scene_graph(q.extra["instance_id"]))


def test_heads_checkpoint_round_trip_and_mismatch(parts, tmp_path):
  cfg, dec, _, heads = parts
  save_heads(heads, tmp_path / "h", cfg, {"step": 7})
  loaded = load_heads(tmp_path / "h", cfg, dec, 16)
  a, b = heads_lib.flat_state(heads), heads_lib.flat_state(loaded)
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)
  other = cfg.copy_and_resolve_references()
  other.router.router_dim = 8
  with pytest.raises(ValueError, match=r"router.router_dim=16 \(config has 8\)"):
    load_heads(tmp_path / "h", other, dec, 16)
  with pytest.raises(ValueError, match="does not fit decoder"):
    load_heads(tmp_path / "h", cfg, dec, 32)  # another embedder width
  token_values = cfg.copy_and_resolve_references()
  token_values.fusion.token_values = True  # same parameters, another reading of the values
  with pytest.raises(ValueError, match=r"fusion.token_values=False \(config has True\)"):
    load_heads(tmp_path / "h", token_values, dec, 16)
  meta = json.loads((tmp_path / "h" / "heads.json").read_text())
  del meta["config"]["fusion.token_values"]  # a heads.json written before the key existed
  (tmp_path / "h" / "heads.json").write_text(json.dumps(meta))
  load_heads(tmp_path / "h", cfg, dec, 16)
  with pytest.raises(ValueError, match=r"fusion.token_values=False \(config has True\)"):
    load_heads(tmp_path / "h", token_values, dec, 16)
  with pytest.raises(FileNotFoundError, match="heads.safetensors is missing"):
    load_heads(tmp_path / "nothing", cfg, dec, 16)
  (tmp_path / "h" / "heads.safetensors").write_bytes(b"\x00garbage")
  with pytest.raises(ValueError, match="unreadable safetensors"):
    load_heads(tmp_path / "h", cfg, dec, 16)


def test_prompts_fit_the_decoder_context(parts):
  """Flat-RAG evidence is cut from its lowest-scored end to fit the context; a question that
  cannot fit at all is a clear error."""
  cfg, dec, kb, _ = parts
  system = _system(parts, verifier=StubVerifier([0.9] * 4))
  system.decoder = decoder_lib.Decoder(dec.model, None, source="random", max_seq_len=192)
  q = kb.questions[0]
  seen = []
  original = system.decoder.generate_ids
  system.decoder.generate_ids = lambda ids, *a, **k: seen.append(ids) or original(ids, *a, **k)
  a = system.answer(q.question, kb.scene_graph(q.extra["instance_id"]), mode="flat_rag")
  prompt = seen[0][0]
  assert len(prompt) + cfg.decode.max_new_tokens <= 192
  text = system.fmt.tok.decode(prompt)
  shown = [t for t in a.retrieved[:cfg.memory.bank_size // 2] if f"{t.verbalize()}." in text]
  assert 0 < len(shown) < cfg.memory.bank_size // 2
  assert shown == a.retrieved[:len(shown)]  # the best-scored triples are the ones kept
  with pytest.raises(ValueError, match="more than the 184"):
    system.answer("why " * 60 + "?", [], mode="no_retrieval")


def test_text_option_scores_with_a_shared_prompt_cache_equal_full_rows(parts):
  """decode.score_text_options (each prompt prefilled once) equals scoring [prompt ; option ;
  EOS] rows from scratch (decode.score_text_rows)."""
  from graphloom_jax.pipeline import decode, prompts
  system = _system(parts)
  fmt = system.fmt
  qs = ["What is on the table?", "Which thing that the man is holding is a kind of tool?"]
  ids = [fmt.evidence_prompt_ids(q, ["man holding hammer.", "hammer is a tool."] * (i + 1))
         for i, q in enumerate(qs)]
  options = [[fmt.answer_ids(o) for o in ("cup", "red plate", "x")],
             [fmt.answer_ids(o) for o in ("hammer", "a very long option name indeed")]]
  got = decode.score_text_options(system._backbone_def, system._backbone_state, ids, options,
                                  fmt.pad)
  rows = [prompts.token_row(p + o, len(p), 256, fmt.pad, "row")
          for p, opts in zip(ids, options) for o in opts]
  batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
  want = decode.score_text_rows(system._backbone_def, system._backbone_state, batch["tokens"],
                                batch["valid"], batch["output_mask"])
  np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)
  assert got.shape == (5,) and np.isfinite(got).all()


def test_memory_option_scores_with_a_shared_prompt_cache_equal_full_rows(parts):
  """GraphLoom's multiple choice (decode.score_options: each prompt read once with its memory,
  the options continuing its cache) equals scoring [prompt ; option ; EOS] rows with the
  memory from scratch (decode.score_rows), also with ragged option counts and with another
  question's evidence; a question without options costs nothing."""
  cfg, _, kb, _ = parts
  system = _system(parts)
  qs = kb.questions[:3]
  graphs = [system.instance_graph(kb.scene_graph(q.extra["instance_id"]),
                                  instance_id=q.extra["instance_id"]) for q in qs]
  options = [q.extra["options"] for q in qs]
  options[1] = options[1][:2] + ["a much longer option than any other here"]
  options[2] = None
  got = system.answer_batch([q.question for q in qs], graphs, options=options)
  assert [len(a.option_scores or []) for a in got] == [4, 3, 0]
  items = system.prepare([q.question for q in qs], graphs)
  for it in items:
    it.prompt = system._prompt(it, "graphloom")
  want, *_ = system._score(items[:2], "graphloom", options[:2])
  np.testing.assert_allclose(got[0].option_scores + got[1].option_scores, want, rtol=1e-5,
                             atol=1e-5)
  # another question's memory: both paths read it, and the scores move
  from graphloom_jax.pipeline import decode
  _, heads_def, heads_state = system._mode_heads["graphloom"]
  arrays = {k: v[::-1] for k, v in system._mode_arrays(items[:2], "graphloom").items()}
  fmt = system.fmt
  ids = [[fmt.answer_ids(o) for o in opts] for opts in options[:2]]
  swapped = decode.score_options(heads_def, heads_state, system._backbone_def,
                                 system._backbone_state, arrays, [it.prompt for it in items[:2]],
                                 ids, fmt.pad, first_layer=system.first_layer)
  rows = system._rows(items[:2], options[:2])
  batch = dict(decode.repeat_rows(arrays, [4, 3]), **rows)
  full, _, _ = decode.score_rows(heads_def, heads_state, system._backbone_def,
                                 system._backbone_state, batch, first_layer=system.first_layer)
  np.testing.assert_allclose(swapped, np.asarray(full), rtol=1e-5, atol=1e-5)
  assert np.abs(swapped - want).max() > 1e-4
  with pytest.raises(ValueError, match="2 prompts, 1 option lists"):
    decode.score_options(heads_def, heads_state, system._backbone_def, system._backbone_state,
                         arrays, [it.prompt for it in items[:2]], ids[:1], fmt.pad,
                         first_layer=system.first_layer)


def test_generation_routing_is_the_teacher_forced_routing(parts):
  """The routing `generate_ids(return_routing=True)` records while writing an answer (what the
  citations read) equals the routing of a teacher-forced pass over [prompt ; answer ; EOS] at
  the same steps, the way citations were computed before."""
  from graphloom_jax.pipeline import decode, prompts
  _, _, kb, _ = parts
  system = _system(parts)
  qs = kb.questions[:3]
  items = system.prepare([q.question for q in qs],
                         [kb.scene_graph(q.extra["instance_id"]) for q in qs])
  for it in items:
    it.prompt = system._prompt(it, "graphloom")
  arrays = system._mode_arrays(items, "graphloom")
  outs, routes = system._generate([it.prompt for it in items], "graphloom", arrays,
                                  return_routing=True)
  plain = system._generate([it.prompt for it in items], "graphloom", arrays)
  assert outs == plain  # recording the routing does not change the answer
  fmt = system.fmt
  length = prompts.bucket(max(len(it.prompt) + len(ids) + 1 for it, ids in zip(items, outs)))
  rows = [prompts.token_row(it.prompt + ids + [fmt.eos], len(it.prompt), length, fmt.pad, "row")
          for it, ids in zip(items, outs)]
  batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
  _, heads_def, heads_state = system._mode_heads["graphloom"]
  _, gates, active = decode.score_rows(heads_def, heads_state, system._backbone_def,
                                       system._backbone_state, {**arrays, **batch},
                                       first_layer=system.first_layer)
  gates, active = np.asarray(gates), np.asarray(active)
  routed = 0
  for j, (ids, (act, gate)) in enumerate(zip(outs, routes)):
    steps = np.flatnonzero(batch["loss_mask"][j])[:len(act)]
    assert len(act) == min(len(ids) + 1, system.config.decode.max_new_tokens)
    np.testing.assert_array_equal(act, active[j][steps])
    np.testing.assert_allclose(gate[act], gates[j][steps][act], rtol=1e-5, atol=1e-6)
    routed += int(act.sum())
    got = system._citations(items[j], gate, act)
    want = system._citations(items[j], gates[j][steps], active[j][steps])
    assert [c.triple for c in got] == [c.triple for c in want]
    np.testing.assert_allclose([c.gate for c in got], [c.gate for c in want], rtol=1e-5)
  assert routed > 0
