"""GraphLoom vs no retrieval vs Flat-RAG on SceneKB with a frozen decoder, plus router ECE.

  python -m launch.train --config=configs/smollm2.py --workdir=runs/smol ...   # train heads
  python -m benchmarks.graphloom_scenekb --workdir=runs/smol --num_questions=60

Reads the run's config.json and its best checkpoint (else the latest). On `num_questions` test
questions (taken round-robin over the five families) it reports, per condition:
  no-retrieval  the question alone;
  flat-rag      the same retrieved triples GraphLoom gets, verbalised into the prompt;
  graphloom     the question alone plus the memory: fusion prefix + routed HieraSlots through
                KG-JSA++ (the router recomputes the active set at every decoding step);
multiple-choice accuracy (length-normalised option log-likelihood, EOS included) and open-answer
EM / F1 (greedy, MMQA/DROP scorer). Router calibration: ECE of the gates at the first answer
step against slot utility on the test questions, raw and after temperature scaling of the gate
logits fitted on the validation questions; a reliability diagram goes to WORKDIR/reliability.png
and every figure to WORKDIR/benchmark.json.
"""

import json
import pathlib
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags, logging

from configs import base
from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import answers, calibration
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import load_embedder
from graphloom_jax.models import router as router_lib
from graphloom_jax.ops import routing
from graphloom_jax.training import data, trainer

_WORKDIR = flags.DEFINE_string("workdir", None, "a launch.train workdir")
_NUM = flags.DEFINE_integer("num_questions", 60, "test questions (round-robin over families)")
_NUM_VAL = flags.DEFINE_integer("num_val", 40, "validation questions for the gate temperature")
_CHUNK = flags.DEFINE_integer("chunk", 4, "questions per forward pass")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 8, "greedy tokens for open answers")
_TEXT = flags.DEFINE_list("text_conditions", ["no-retrieval", "flat-rag"],
                          "prompt-only baselines to run")
flags.mark_flag_as_required("workdir")

def round_robin(questions, n):
  by_family = {}
  for q in questions:
    by_family.setdefault(q.extra.get("metadata", {}).get("family", q.family), []).append(q)
  out, i = [], 0
  while len(out) < n and any(i < len(v) for v in by_family.values()):
    for fam in sorted(by_family):
      if i < len(by_family[fam]) and len(out) < n:
        out.append(by_family[fam][i])
    i += 1
  return out


def text_condition(dec, fmt, prompts, questions, chunk, max_new):
  """MC accuracy and open EM/F1 for prompt-only conditions."""
  correct, preds = 0, []
  for s in range(0, len(questions), chunk):
    qs, ps = questions[s:s + chunk], prompts[s:s + chunk]
    opts = [[fmt.answer_ids(o) for o in q.extra["options"]] for q in qs]
    # a few fixed widths, so the forward pass compiles once per width, not once per chunk
    length = -(-max(len(p) + len(o) for p, os_ in zip(ps, opts) for o in os_) // 64) * 64
    scores = answers.score_options(lambda t, v: dec.logits(t, v), ps, opts, length, fmt.pad)
    correct += int(np.sum(answers.choose(scores) == [q.extra["answer_index"] for q in qs]))
    outs = dec.generate_ids(ps, max_new)
    preds += [fmt.decode(o) for o in outs]
  return correct / len(questions), preds


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  workdir = pathlib.Path(_WORKDIR.value)
  # The run's settings over today's defaults (fields added since the run keep their defaults).
  config = base.get_base_config()
  config.update(ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text())))
  dec = decoder_lib.from_config(config.model)
  fmt = data.TextFormat(dec.tokenizer or data.ByteTokenizer(dec.config.vocab_size))
  spec = data.FeatureSpec.from_config(config)
  embedder = load_embedder(config.embedder.path or None)
  test_kb, val_kb = scenekb.load("test"), scenekb.load("validation")
  questions = round_robin(test_kb.questions, _NUM.value)
  val_questions = round_robin(val_kb.questions, _NUM_VAL.value)
  t0 = time.time()
  test_arrays = data.featurize(test_kb, questions, fmt, embedder.embed, spec)
  val_arrays = data.featurize(val_kb, val_questions, fmt, embedder.embed, spec)
  evidence = data.retrieve(test_kb, questions, embedder.embed, spec)
  print(f"featurised {len(questions)} test + {len(val_questions)} validation questions in "
        f"{time.time() - t0:.0f}s")

  t = trainer.Trainer(config, dec.model, val_arrays, val_arrays, workdir,
                      devices=jax.devices()[:1], progress=False, log=lambda *_: None)
  src = "best"
  if not t.restore("best"):
    src = "latest"
    if not t.restore("latest"):
      raise FileNotFoundError(f"{workdir}: no checkpoint to evaluate")
  print(f"heads from {src} at step {t.step} ({t.num_params:,} trainable parameters)")

  gold = [q.answer_texts for q in questions]
  results = {}
  for name in _TEXT.value:
    start = time.time()
    if name == "no-retrieval":
      prompts = [fmt.prompt_ids(q.question) for q in questions]
    else:
      prompts = [fmt.evidence_prompt_ids(q.question, [f"{x.verbalize()}." for x in ev])
                 for q, ev in zip(questions, evidence)]
    acc, preds = text_condition(dec, fmt, prompts, questions, _CHUNK.value, _MAX_NEW.value)
    results[name] = dict(mc_accuracy=acc, **answers.mean_answer_metrics(preds, gold),
                         seconds=time.time() - start, examples=preds[:5])
    print(f"{name}: done in {results[name]['seconds']:.0f}s", flush=True)

  start = time.time()
  heads = t.heads()
  ev = t.evaluate(test_arrays)
  preds = []
  for s in range(0, len(questions), _CHUNK.value):
    batch = {k: jnp.asarray(v[s:s + _CHUNK.value]) for k, v in test_arrays.items()}
    mem, inputs = heads.memory(batch, dec.model.dtype)
    prompts = [fmt.prompt_ids(q.question) for q in questions[s:s + _CHUNK.value]]
    outs = dec.generate_ids(prompts, _MAX_NEW.value, memory=mem,
                            router=router_lib.BoundRouter(heads.router, inputs))
    preds += [fmt.decode(o) for o in outs]
  results["graphloom"] = dict(mc_accuracy=ev["s_ans"], **answers.mean_answer_metrics(preds, gold),
                              routed_slot_precision=ev["s_faith"], seconds=time.time() - start,
                              examples=preds[:5])

  def gate_stats(arrays):
    gates, logits, utils, valid = [], [], [], []
    for batch, real in data.eval_batches(arrays, config.train.batch_size):
      out = jax.device_get(trainer.eval_step(
          t.params, t.rest, t.backbone_state, batch, heads_def=t.heads_def,
          backbone_def=t.backbone_def, model_call=t.model_call, dtype=t.dtype))
      gates.append(out["gates"][:real])
      logits.append(out["gate_logits"][:real])
      utils.append(batch["slot_utility"][:real])
      valid.append(batch["slot_valid"][:real])
    return [np.concatenate(x) for x in (gates, logits, utils, valid)]

  g_val, z_val, u_val, m_val = gate_stats(val_arrays)
  g_test, z_test, u_test, m_test = gate_stats(test_arrays)
  temp = float(routing.fit_temperature(jnp.asarray(z_val.ravel()), jnp.asarray(u_val.ravel()),
                                       jnp.asarray(m_val.ravel())))
  cal_test = np.asarray(routing.apply_temperature(jnp.asarray(z_test), temp))
  raw = calibration.reliability(g_test, u_test, mask=m_test)
  cal = calibration.reliability(cal_test, u_test, mask=m_test)
  png = calibration.reliability_diagram(workdir / "reliability.png",
                                        {"uncalibrated": raw, "calibrated (T fitted on val)": cal})
  results["router_calibration"] = dict(
      ece_uncalibrated=raw.ece, ece_calibrated=cal.ece, gate_temperature=temp,
      reliability_temperature=float(heads.router.temperature[...]),
      useful_slot_rate=float(u_test[m_test].mean()), diagram=png)
  (workdir / "benchmark.json").write_text(json.dumps(results, indent=2))

  print(f"\nSceneKB test, {len(questions)} questions, decoder {dec.source}")
  print(f"{'condition':14s} {'MC acc':>7s} {'EM':>6s} {'F1':>6s} {'seconds':>8s}")
  for name in [*_TEXT.value, "graphloom"]:
    r = results[name]
    print(f"{name:14s} {100 * r['mc_accuracy']:7.1f} {r['em']:6.1f} {r['f1']:6.1f} "
          f"{r['seconds']:8.0f}")
  rc = results["router_calibration"]
  print(f"router gate ECE: {rc['ece_uncalibrated']:.3f} uncalibrated -> {rc['ece_calibrated']:.3f}"
        f" calibrated (T = {temp:.2f}); ratio {rc['ece_calibrated'] / max(rc['ece_uncalibrated'], 1e-12):.2f}")
  for name in _TEXT.value:
    print(f"GraphLoom / {name} MC accuracy ratio: "
          f"{results['graphloom']['mc_accuracy'] / max(results[name]['mc_accuracy'], 1e-12):.2f}")


if __name__ == "__main__":
  app.run(main)
