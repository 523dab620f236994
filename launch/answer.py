"""The main job: answer questions from evidence with the decoder, and score the answers.

  python -m launch.answer                                  # SceneKB test questions, embedded model
  python -m launch.answer --question="What is the horse in front of?" \
      --evidence_file=evidence.txt                         # your own question and evidence
  python -m launch.answer --config=configs/smollm2.py --config.model.dtype=bfloat16

Evidence enters the prompt as text (Flat-RAG). On SceneKB the evidence for a question is the
scene descriptions of its candidate documents (the gold scene and distractors); answers are
scored with MMQA's EM/F1.
"""

import json
import pathlib
import time

from absl import app, flags
from ml_collections import config_flags

from graphloom_jax.data import scenekb
from graphloom_jax.evaluation import answers as answer_metrics
from graphloom_jax.models import decoder as decoder_lib

_CONFIG = config_flags.DEFINE_config_file("config", "configs/smollm2.py", "configuration")
flags.DEFINE_string("question", None, "a question to answer (else SceneKB questions)")
flags.DEFINE_string("evidence_file", None, "text file (one fact per line) or triples JSONL")
flags.DEFINE_string("split", "test", "SceneKB split")
flags.DEFINE_integer("num_questions", 8, "how many SceneKB questions")
flags.DEFINE_string("output", None, "optional JSONL file for the predictions")

PROMPT = ("Use the evidence to answer the question with a few words.\n\nEvidence:\n{evidence}\n\n"
          "Question: {question}")


def read_evidence(path: str) -> str:
  path = pathlib.Path(path)
  if not path.exists():
    raise FileNotFoundError(f"--evidence_file not found: {path}")
  if path.suffix == ".jsonl":
    from graphloom_jax.graph.triples import read_triples_jsonl
    triples, _ = read_triples_jsonl(path)
    return "\n".join(f"{t.subject} {t.relation} {t.object}." for t in triples)
  text = path.read_text().strip()
  if not text:
    raise ValueError(f"--evidence_file {path} is empty")
  return text


def main(argv):
  del argv
  f, cfg = flags.FLAGS, _CONFIG.value
  start = time.time()
  decoder = decoder_lib.from_config(cfg.model)
  print(f"decoder: {decoder.source} ({decoder.config.num_layers} layers, {cfg.model.dtype}), "
        f"loaded in {time.time() - start:.1f}s")
  if f.question:
    evidence = read_evidence(f.evidence_file) if f.evidence_file else ""
    prompt = PROMPT.format(evidence=evidence, question=f.question) if evidence else f.question
    print(decoder.generate([prompt], cfg.eval.max_new_tokens)[0])
    return
  kb = scenekb.load(f.split)
  questions = kb.questions[: f.num_questions]
  prompts = []
  for q in questions:
    docs = [kb.texts[d].text for d in q.text_doc_ids if d in kb.texts]
    prompts.append(PROMPT.format(evidence="\n".join(docs), question=q.question))
  start = time.time()
  predictions = decoder.generate(prompts, cfg.eval.max_new_tokens)
  elapsed = time.time() - start
  golds = [[a.answer for a in q.answers] for q in questions]
  rows = []
  for q, pred, gold in zip(questions, predictions, golds):
    em, f1 = answer_metrics.answer_metrics(pred, gold)
    rows.append(dict(qid=q.qid, family=q.family, question=q.question, prediction=pred,
                     gold=gold, em=em, f1=f1))
    print(f"[{q.family:9s}] {q.question}\n    -> {pred!r}  (gold {gold}, F1 {f1:.2f})")
  scores = answer_metrics.mean_answer_metrics(predictions, golds)
  print(f"SceneKB {f.split}: {len(rows)} questions, EM {scores['em']:.3f}, "
        f"F1 {scores['f1']:.3f}, {elapsed:.1f}s generation")
  if f.output:
    with open(f.output, "w") as out:
      for row in rows:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
  app.run(main)
