"""Every ablation switch of the SceneKB tables changes the code path it names (tiny config:
random decoder, random heads, hashed embeddings), and the text-mode prompt styles."""

import numpy as np
import pytest

from graphloom_jax.configs import tiny
from graphloom_jax.data import scenekb
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import GraphLoom, ablation, graphloom, prompts

from fakes import HashEmbed


class StubVerifier:
  """Every claim gets probability p."""

  def __init__(self, p):
    self.p = p

  def entailment(self, premise, hypotheses):
    return np.full(len(hypotheses), self.p)


@pytest.fixture(scope="module")
def parts():
  cfg = tiny.get_config()
  dec = decoder_lib.from_config(cfg.model)
  kb = scenekb.load("validation", root=scenekb.V1_FOLDER)
  heads = graphloom.new_heads(cfg, dec, 16, seed=3)
  return cfg, dec, kb, heads


def _system(parts, verifier=None, **overrides):
  cfg, dec, kb, heads = parts
  cfg = cfg.copy_and_resolve_references()
  for key, value in overrides.items():
    section, name = key.split("__")
    cfg[section][name] = value
  return GraphLoom(cfg, dec, HashEmbed(), heads, kb_sources=[kb.kb_source()],
                   verifier=verifier or StubVerifier(0.9))


def _ask(system, kb, n=2, mode="graphloom"):
  qs = kb.questions[:n]
  return system.answer_batch([q.question for q in qs],
                             [kb.scene_graph(q.extra["instance_id"]) for q in qs],
                             options=[q.extra["options"] for q in qs], mode=mode)


def test_neutralise_features():
  rng = np.random.default_rng(0)
  arrays = dict(slot_features=rng.random((2, 6, 5), np.float32),
                slot_valid=np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool),
                slot_reliability=rng.random((2, 6), np.float32),
                slot_key_tokens=rng.integers(0, 9, (2, 6, 3)).astype(np.int32))
  out = ablation.neutralise(arrays, ablation.Ablation(drop_features=("centrality", "conf_ext")))
  f, v = out["slot_features"], arrays["slot_valid"]
  for b in range(2):
    for col in (1, 2):
      np.testing.assert_allclose(f[b, v[b], col], arrays["slot_features"][b, v[b], col].mean(),
                                 rtol=1e-6)
    np.testing.assert_array_equal(f[b][:, [0, 3, 4]], arrays["slot_features"][b][:, [0, 3, 4]])
  np.testing.assert_array_equal(out["slot_reliability"], np.where(v, 0.5, 0.0))
  np.testing.assert_array_equal(out["slot_key_tokens"], arrays["slot_key_tokens"])
  ctx = ablation.neutralise(arrays, ablation.Ablation(drop_features=("context",)))
  assert (ctx["slot_key_tokens"] == -1).all()
  np.testing.assert_array_equal(ctx["slot_reliability"], arrays["slot_reliability"])
  assert ablation.neutralise(arrays, ablation.Ablation()) is arrays


def test_bad_switches_are_clear_errors(parts):
  with pytest.raises(ValueError, match="drop_features.*unknown"):
    _system(parts, ablation__drop_features="centrality,colour")
  with pytest.raises(ValueError, match="ablation.router"):
    _system(parts, ablation__router="random")
  with pytest.raises(ValueError, match="baseline.prompt"):
    _system(parts, baseline__prompt="chatty")


def test_uniform_router_routes_every_valid_slot_with_equal_gates(parts):
  _, _, kb, _ = parts
  learned = _ask(_system(parts), kb)
  uniform = _ask(_system(parts, ablation__router="uniform"), kb)
  for a, b in zip(learned, uniform):
    n_bank = len({c.triple for c in b.evidence})
    assert {c.gate for c in b.evidence} == {0.5}
    assert n_bank > len({c.triple for c in a.evidence})  # top 2 + 2 vs every valid slot
  system = _system(parts, ablation__router="uniform")
  prepared = system.prepare([kb.questions[0].question],
                            [kb.scene_graph(kb.questions[0].extra["instance_id"])])[0]
  # every triple of the bank is cited: all valid slots are active at every answer step
  assert len(uniform[0].evidence) == len(prepared.evidence.triples)


def test_no_prefix_masks_the_prefix_and_changes_the_scores(parts):
  _, _, kb, _ = parts
  system = _system(parts, ablation__prefix=False)
  prepared = system.prepare([kb.questions[0].question],
                            [kb.scene_graph(kb.questions[0].extra["instance_id"])])
  mem, _ = system._memory(system._arrays(prepared))
  assert not np.asarray(mem.prefix_mask).any()
  full = _system(parts)
  mem_full, _ = full._memory(full._arrays(prepared))
  assert np.asarray(mem_full.prefix_mask).any()
  a, b = _ask(full, kb, 1)[0], _ask(system, kb, 1)[0]
  assert not np.allclose(a.option_scores, b.option_scores)


def test_dropped_features_reach_the_router(parts):
  _, _, kb, _ = parts
  system = _system(parts, ablation__drop_features="retrieval_score,centrality")
  prepared = system.prepare([kb.questions[0].question],
                            [kb.scene_graph(kb.questions[0].extra["instance_id"])])
  arrays = system._arrays(prepared)
  valid = arrays["slot_valid"][0]
  for col in (0, 2):
    assert np.unique(arrays["slot_features"][0, valid, col]).size == 1
  assert np.unique(prepared[0].evidence.arrays["slot_features"][valid, 0]).size > 1
  a = _ask(_system(parts), kb, 1)[0]
  b = _ask(system, kb, 1)[0]
  assert not np.allclose(a.option_scores, b.option_scores)


def test_corrective_and_revision_switches(parts):
  _, _, kb, _ = parts
  forced = dict(correct__tau_eval=1.01)  # every subgraph scores below: an action always runs
  on = _ask(_system(parts, StubVerifier(0.1), **forced), kb)
  off = _ask(_system(parts, StubVerifier(0.1), ablation__corrective=False,
                     verify__revise=False, **forced), kb)
  for a, b in zip(on, off):
    assert a.correction is not None and a.correction.action is not None
    assert a.revised or a.revision_text is not None  # unsupported: one revision attempted
    assert b.correction is None and b.timings["correction"] == 0.0
    assert not b.revised and b.revision_text is None and b.first_text is None
    assert not b.supported


def test_routed_text_puts_the_routed_triples_in_the_prompt(parts):
  _, _, kb, _ = parts
  system = _system(parts)
  q = kb.questions[0]
  calls = []
  original = system.decoder.generate_ids

  def recording(ids, *args, **kwargs):
    calls.append((ids, kwargs))
    return original(ids, *args, **kwargs)

  system.decoder.generate_ids = recording
  try:
    a = system.answer(q.question, kb.scene_graph(q.extra["instance_id"]),
                      options=q.extra["options"], mode="routed_text")
  finally:
    del system.decoder.generate_ids
  assert a.mode == "routed_text" and a.evidence
  assert 1 <= len(a.evidence) <= system.config.memory.active_slots
  prompt = system.fmt.decode(calls[0][0][0])
  for c in a.evidence:
    assert f"{c.triple.verbalize()}." in prompt
  assert "memory" not in calls[0][1]  # text only: no slots reach the decoder
  flat = system.answer(q.question, kb.scene_graph(q.extra["instance_id"]), mode="flat_rag")
  assert len(flat.retrieved) >= len(a.evidence)


def test_prompt_styles():
  for style in prompts.STYLES:
    text = prompts.styled(style, "What is the horse near?", ["horse near fence."])
    assert text.count("What is the horse near?") == 1 and "horse near fence." in text
  assert prompts.styled("instruct", "Q?") == prompts.PROMPT.format(question="Q?")
  assert prompts.styled("terse", "Q?").startswith(prompts.TERSE)
  few = prompts.styled("fewshot", "Q?", ["a b c."])
  assert few.count("Question:") == 4 and few.endswith("Question: Q?\nAnswer:")
  with pytest.raises(ValueError, match="prompt style"):
    prompts.styled("long", "Q?")


def test_training_refuses_ablations(parts):
  from graphloom_jax.training import data
  cfg = parts[0].copy_and_resolve_references()
  cfg.ablation.router = "uniform"
  with pytest.raises(ValueError, match="answering time"):
    data.load_training_data(cfg, parts[1], embedder=HashEmbed())


def test_interleaved_and_kb_rows_use_existing_switches(parts):
  """-interleaved (retrieval.second_round = "none") and no KB (graph.kb_hops = 0)."""
  _, _, kb, _ = parts
  q = kb.questions[0]
  scene = kb.scene_graph(q.extra["instance_id"])
  full = _system(parts).prepare([q.question], [scene])[0]
  one = _system(parts, retrieval__second_round="none").prepare([q.question], [scene])[0]
  assert "second_round" in full.subgraph.timings and "second_round" not in one.subgraph.timings
  assert set(one.subgraph.rounds) == {1}
  no_kb = _system(parts, graph__kb_hops=0).prepare([q.question], [scene])[0]
  assert any(t.source != "scene" for t in full.graph.triples)
  assert all(t.source == "scene" for t in no_kb.graph.triples)
