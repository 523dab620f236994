"""The main job: answer questions from evidence with the decoder, and score the answers.

  python -m launch.answer                                  # SceneKB test questions, embedded model
  python -m launch.answer --question="What is the horse in front of?" \
      --evidence_file=evidence.txt                         # your own question and evidence
  python -m launch.answer --config=configs/smollm2.py --config.model.dtype=bfloat16

Evidence enters the prompt as text (Flat-RAG). On SceneKB the evidence for a question is the
subgraph that bounded retrieval (K seeds, 2-hop expansion bounded by d_max and N_max, and the
configured second round) finds in the question's instance graph (scene triples >= tau_edge plus
WordNet facts), verbalised in question-score order; answers are scored with MMQA's EM/F1 and the
subgraph with R@5 of the gold supporting triples.
"""

import json
import time

from absl import app, flags
from ml_collections import config_flags

from graphloom_jax.data import scenekb
from graphloom_jax.data.evidence import read_evidence, verbalize_lines
from graphloom_jax.evaluation import answers as answer_metrics
from graphloom_jax.evaluation import retrieval_metrics
from graphloom_jax.graph.instance_graph import build_instance_graph, graph_triples
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import load_embedder
from graphloom_jax.retrieval import factory as retrieval_factory
from graphloom_jax.retrieval import subgraph as sg

_CONFIG = config_flags.DEFINE_config_file("config", "configs/smollm2.py", "configuration")
flags.DEFINE_string("question", None, "a question to answer (else SceneKB questions)")
flags.DEFINE_string("evidence_file", None, "text file (one fact per line) or triples JSONL")
flags.DEFINE_string("split", "test", "SceneKB split")
flags.DEFINE_integer("num_questions", 8, "how many SceneKB questions")
flags.DEFINE_integer("evidence_triples", 15, "retrieved triples shown to the decoder")
flags.DEFINE_string("predictions", None, "optional JSONL file for the predictions")

PROMPT = "Facts:\n{evidence}\n\nQuestion: {question}\nAnswer with one word from the facts."


def multiple_choice_accuracy(decoder, prompts, questions) -> float:
  """Share of questions whose gold option has the highest mean token log-likelihood (option
  tokens plus the end-of-turn token) after the chat-formatted prompt."""
  tok = decoder.tokenizer
  prompt_ids = [tok.chat_ids(p) for p in prompts]
  options = [[tok.encode(o) + [tok.eos_ids[0]] for o in q.extra["options"]] for q in questions]
  longest = max(len(p) + max(len(o) for o in opts) for p, opts in zip(prompt_ids, options))
  length = -(-longest // 64) * 64
  scores = answer_metrics.score_options(
      lambda ids, valid: decoder.logits(ids, valid), prompt_ids, options, length, tok.pad_id)
  chosen = answer_metrics.choose(scores)
  return float(sum(int(c) == q.extra["answer_index"] for c, q in zip(chosen, questions)) /
               len(questions))


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
  embedder = load_embedder(cfg.embedder.path or None)
  writer = retrieval_factory.query_writer(cfg, decoder)
  prompts, recalls = [], []
  start = time.time()
  for q in questions:
    graph = build_instance_graph(kb.instance_triples(q.extra["instance_id"]),
                                 tau_edge=cfg.graph.tau_edge)
    pool = sg.TriplePool(graph_triples(graph), embedder=embedder)
    sub = retrieval_factory.bounded_retriever(cfg, pool, embedder, writer).retrieve(q.question)
    edges = sub.edges[: f.evidence_triples]
    recalls.append(retrieval_metrics.recall_at_k(
        [t.key() for t in sub.edges], {tuple(g) for g in q.extra["gold_triples"]}, 5))
    evidence = verbalize_lines(edges)
    prompts.append(PROMPT.format(evidence=evidence, question=q.question))
  print(f"retrieval: {len(questions)} subgraphs in {time.time() - start:.1f}s, "
        f"R@5 of gold triples {sum(recalls) / len(recalls):.3f}")
  start = time.time()
  predictions = decoder.generate(prompts, cfg.eval.max_new_tokens)
  elapsed = time.time() - start
  accuracy = multiple_choice_accuracy(decoder, prompts, questions)
  golds = [[a.answer for a in q.answers] for q in questions]
  rows = []
  for q, pred, gold in zip(questions, predictions, golds):
    em, f1 = answer_metrics.answer_metrics(pred, gold)
    rows.append(dict(qid=q.qid, family=q.family, question=q.question, prediction=pred,
                     gold=gold, em=em, f1=f1))
    print(f"[{q.family:9s}] {q.question}\n    -> {pred!r}  (gold {gold}, F1 {f1:.2f})")
  scores = answer_metrics.mean_answer_metrics(predictions, golds)
  print(f"SceneKB {f.split}: {len(rows)} questions, EM {scores['em']:.1f}%, "
        f"F1 {scores['f1']:.1f}%, {elapsed:.1f}s generation; multiple choice (4 options, "
        f"length-normalised log-likelihood) accuracy {100 * accuracy:.1f}%")
  if f.predictions:
    with open(f.predictions, "w") as out:
      for row in rows:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
  app.run(main)
