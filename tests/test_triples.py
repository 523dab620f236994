"""Triple schema and JSON/JSONL IO, canonicalisation (WordNet morphy), REBEL parsing with
conf_ext, VG scene graphs, tau_edge filtering and the instance graph."""

import json
import math
import os
import random

import networkx as nx
import pytest

from graphloom_jax.graph import canonical, instance_graph, rebel, scene_graph, triples as tr
from graphloom_jax.graph.triples import Provenance, Triple, TripleFormatError


def random_triples(rng, n):
  words = ["dog", "man", "hat", "table", "cup", "street", "horse", "tree"]
  rels = ["on", "wearing", "near", "is a", "has part"]
  out = []
  for i in range(n):
    region = tuple(rng.randrange(0, 500) for _ in range(4)) if rng.random() < 0.5 else None
    span = (i, i + rng.randrange(1, 9)) if rng.random() < 0.5 else None
    out.append(Triple(rng.choice(words), rng.choice(rels), rng.choice(words),
                      rng.random(), rng.choice(tr.KNOWN_SOURCES),
                      Provenance(f"img{rng.randrange(5)}", region, span)))
  return out


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_roundtrip(tmp_path, suffix):
  ts = random_triples(random.Random(random.getrandbits(64)), 40)
  path = tmp_path / f"t{suffix}"
  assert tr.write_triples(path, ts) == 40
  back, report = tr.read_triples(path)
  assert back == ts and report.read == 40 and report.skipped == 0


def test_jsonl_gz(tmp_path):
  import gzip
  ts = random_triples(random.Random(random.getrandbits(64)), 5)
  path = tmp_path / "t.jsonl.gz"
  with gzip.open(path, "wt") as f:
    for t in ts:
      f.write(json.dumps(t.to_json()) + "\n")
  assert tr.read_triples(path)[0] == ts


BAD_LINES = [
    ('{"subject": "dog", "relation": "on", "object": "bed", "confidence": 1.5}', "confidence"),
    ('{"subject": "", "relation": "on", "object": "bed"}', "subject"),
    ('{"subject": "dog", "object": "bed"}', "missing key"),
    ('{"subject": "dog", "relation": "on", "object": "bed", "conf": 0.3}', "unknown key"),
    ('{"subject": "dog", "relation": "on", "object": "bed", "provenance": {"span": [5, 2]}}',
     "span"),
    ('{"subject": "dog", "relation": "on", "object": "bed", "provenance": {"region": [1, 2]}}',
     "region"),
    ('{"subject": "dog", "relation": "on", "object": "bed", "confidence": NaN}', "confidence"),
    ('{"subject": "dog", "relation": "on", "object": "bed"', "not a valid JSON"),
    ('["dog", "on", "bed"]', "JSON object"),
]


@pytest.mark.parametrize("bad,expected", BAD_LINES)
def test_strict_names_file_and_line(tmp_path, bad, expected):
  good = [t.to_json() for t in random_triples(random.Random(random.getrandbits(64)), 3)]
  lines = [json.dumps(good[0]), json.dumps(good[1]), bad, json.dumps(good[2])]
  path = tmp_path / "bad.jsonl"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(TripleFormatError) as e:
    tr.read_triples(path, strict=True)
  assert f"{path}:3:" in str(e.value) and expected in str(e.value)
  kept, report = tr.read_triples(path, strict=False)
  assert [t.to_json() for t in kept] == good
  assert report.read == 3 and report.skipped == 1 and f"{path}:3:" in report.errors[0]


def test_json_list_errors_name_index(tmp_path):
  path = tmp_path / "t.json"
  path.write_text(json.dumps([{"subject": "a", "relation": "r", "object": "b"},
                              {"subject": "a", "relation": "r"}]))
  with pytest.raises(TripleFormatError, match=r"triples\[1\]"):
    tr.read_triples(path)
  assert len(tr.read_triples(path, strict=False)[0]) == 1
  with pytest.raises(TripleFormatError, match="unknown triple file type"):
    tr.read_triples(tmp_path / "t.csv")


def test_triple_validation_in_constructor():
  with pytest.raises(TripleFormatError, match="confidence"):
    Triple("a", "r", "b", confidence=-0.1)
  with pytest.raises(TripleFormatError, match="confidence"):
    Triple("a", "r", "b", confidence=True)
  assert Triple("a", "r", "b").verbalize() == "a r b"


# ---------------------------------------------------------------------------- canonicalisation


@pytest.mark.parametrize("mention,expected", [
    ("The Dogs", "dog"), ("men", "man"), ("leaves", "leaf"), ("buses", "bus"), ("bus", "bus"),
    ("glasses", "glass"), ("jeans", "jean"), ("Traffic_Lights", "traffic light"),
    ("  an   Apple. ", "apple"), ("children", "child"), ("wolves", "wolf"), ("mice", "mouse"),
    ("ladies", "lady"), ("boxesful", "boxful"), ("kiss", "kiss"), ("people", "people"),
    ("benches", "bench"), ("dishes", "dish"), ("foxes", "fox"), ("a", "a"), (".", "."),
    (" ?! ", "?!"),
])
def test_canonical_names(mention, expected):
  assert canonical.Canonicalizer()(mention) == expected


def test_morphy_rules_match_wordnet_definition():
  # A closed-form morphy over a hand-made lexicon: each rule fires only into a lemma.
  m = canonical.Morphy({"geese": ("goose",)}, {"church", "box", "city", "fireman", "bus", "buss",
                                               "goose", "dish", "glas"})
  assert m.base_forms("churches") == ["church"]
  assert m.base_forms("boxes") == ["box"]
  assert m.base_forms("cities") == ["city"]
  assert m.base_forms("firemen") == ["fireman"]
  assert m.base_forms("busses") == ["buss"]
  assert m.base_forms("glass") == []  # ends in "ss": no detachment, though "glas" is a lemma
  assert m.base_forms("buses") == ["bus"]
  assert m.base_forms("geese") == ["goose"]
  assert m.base_forms("xs") == []  # too short
  assert m.singular("dirty dishes") == "dirty dish"


def test_aliases(tmp_path):
  path = tmp_path / "aliases.tsv"
  path.write_text("# alias\tcanonical\nTV\ttelevision\nautomobile\tcar\n")
  c = canonical.Canonicalizer(canonical.load_aliases(path))
  # Looked up before and after singularisation.
  assert c("the TV") == "television" and c("Automobiles") == "car" and c("automobile") == "car"
  assert c("TVs") == "television"
  bad = tmp_path / "bad.tsv"
  bad.write_text("tv television\n")
  with pytest.raises(TripleFormatError, match=r"bad.tsv:1"):
    canonical.load_aliases(bad)


def test_merge_keeps_highest_confidence():
  rng = random.Random(random.getrandbits(64))
  confs = [rng.random() for _ in range(6)]
  ts = [Triple("Dogs", "on", "the bed", c, "rebel", Provenance("i1")) for c in confs]
  ts.append(Triple("dog", "on", "bed", 0.2, "scene", Provenance("i2")))
  merged = canonical.canonicalize(ts)
  assert [(t.key(), t.provenance.instance) for t in merged] == [
      (("dog", "on", "bed"), "i1"), (("dog", "on", "bed"), "i2")]
  assert merged[0].confidence == max(confs)


# ---------------------------------------------------------------------------- REBEL


REBEL_OUT = ("<s><triplet> Punta Cana <subj> Dominican Republic <obj> country <subj> La "
             "Altagracia Province <obj> located in the administrative territorial entity "
             "<triplet> Dominican Republic <subj> Caribbean <obj> part of</s>")


def test_parse_rebel_shared_heads():
  assert rebel.parse_rebel(REBEL_OUT) == [
      ("Punta Cana", "country", "Dominican Republic"),
      ("Punta Cana", "located in the administrative territorial entity",
       "La Altagracia Province"),
      ("Dominican Republic", "part of", "Caribbean")]


def test_rebel_confidence_is_exp_mean_logprob_of_span():
  toks = ["<triplet>", " man", "<subj>", " horse", "<obj>", " riding", "<subj>", " hat",
          "<obj>", " wearing", "</s>"]
  lps = [-random.random() for _ in toks]
  got = rebel.rebel_triples(toks, lps, instance="img7", text_span=(0, 30))
  first = [0, 1, 2, 3, 4, 5]  # head part + its own group
  second = [0, 1, 6, 7, 8, 9]
  assert [t.key() for t in got] == [("man", "riding", "horse"), ("man", "wearing", "hat")]
  for t, idx in zip(got, (first, second)):
    assert math.isclose(t.confidence, math.exp(sum(lps[i] for i in idx) / len(idx)),
                        rel_tol=1e-12)
    assert t.source == "rebel" and t.provenance == Provenance("img7", span=(0, 30))


@pytest.mark.parametrize("text,match", [
    ("<triplet> man <subj> <obj> riding", "incomplete"),
    ("<triplet> man <obj> riding", "without a preceding <subj>"),
    ("hello <triplet> man <subj> horse <obj> riding", "before the first <triplet>"),
])
def test_rebel_malformed(text, match):
  with pytest.raises(TripleFormatError, match=match):
    rebel.parse_rebel(text)
  lenient = rebel.parse_rebel(text + " <triplet> dog <subj> bed <obj> on", strict=False)
  assert lenient[-1] == ("dog", "on", "bed")


def test_rebel_logprob_checks():
  with pytest.raises(ValueError, match="log-prob"):
    rebel.rebel_triples(["<triplet>", " a", "<subj>", " b", "<obj>", " c"],
                        [0.1, -1, -1, -1, -1, -1])
  with pytest.raises(ValueError, match="6 tokens but 2"):
    rebel.rebel_triples(["<triplet>", " a", "<subj>", " b", "<obj>", " c"], [-1, -1])


def test_rebel_model_path_absent(tmp_path):
  with pytest.raises(FileNotFoundError, match="no REBEL weights"):
    rebel.RebelExtractor(tmp_path)


def test_rebel_model_backed_logprobs(tmp_path):
  """The model-backed path on a tiny random BART: its per-token log-probs must equal a
  teacher-forced forward pass (independent reference), and parsing must run on its output.
  Real REBEL weights are not shipped; with them, `RebelExtractor(path)` is the same code."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from tokenizers import Tokenizer, models, pre_tokenizers
  vocab = {w: i for i, w in enumerate(
      ["<pad>", "<s>", "</s>", "<unk>", "<triplet>", "<subj>", "<obj>", "man", "horse",
       "riding", "a", "is", "the"])}
  tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                              bos_token="<s>", eos_token="</s>",
                                              unk_token="<unk>")
  cfg = transformers.BartConfig(vocab_size=len(vocab), d_model=16, encoder_layers=1,
                                decoder_layers=1, encoder_attention_heads=2,
                                decoder_attention_heads=2, encoder_ffn_dim=32,
                                decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=0,
                                bos_token_id=1, eos_token_id=2, decoder_start_token_id=2,
                                forced_bos_token_id=None, forced_eos_token_id=None)
  torch.manual_seed(random.randrange(1 << 30))
  transformers.BartForConditionalGeneration(cfg).save_pretrained(tmp_path)
  fast.save_pretrained(tmp_path)
  ext = rebel.RebelExtractor(tmp_path, max_new_tokens=8)
  (toks, lps), = ext.generate(["a man is riding the horse"])
  enc = ext.tokenizer(["a man is riding the horse"], return_tensors="pt")
  ids = [ext.tokenizer.convert_tokens_to_ids(t.strip()) for t in toks]
  dec = torch.tensor([[cfg.decoder_start_token_id] + ids])
  with torch.no_grad():
    logits = ext.model(**enc, decoder_input_ids=dec[:, :-1]).logits[0]
  ref = torch.log_softmax(logits, -1)[torch.arange(len(ids)), torch.tensor(ids)]
  assert len(lps) == len(ids) > 0
  assert max(abs(a - b) for a, b in zip(lps, ref.tolist())) < 1e-5
  assert isinstance(ext.extract(["a man is riding the horse"])[0], list)


# ---------------------------------------------------------------------------- scene graphs


VG_GRAPH = {
    "image_id": 2407890,
    "objects": [{"object_id": 1058498, "names": ["man"], "x": 10, "y": 20, "w": 100, "h": 200},
                {"object_id": 1058534, "names": ["horse"], "x": 50, "y": 120, "w": 300,
                 "h": 180},
                {"object_id": 1058508, "name": "hat", "x": 30, "y": 10, "w": 40, "h": 30}],
    "relationships": [
        {"relationship_id": 15927, "predicate": "riding", "subject_id": 1058498,
         "object_id": 1058534, "confidence": 0.9},
        {"relationship_id": 15928, "predicate": "WEARING", "subject_id": 1058498,
         "object_id": 1058508},
        {"relationship_id": 15929, "predicate": "near",
         "subject": {"object_id": 7, "name": "tree", "x": 0, "y": 0, "w": 5, "h": 5},
         "object": {"object_id": 1058534, "names": ["horse"]}, "confidence": 0.2}],
}


def test_scene_graph_triples():
  got = scene_graph.scene_graph_triples(VG_GRAPH)
  assert [(t.key(), t.confidence) for t in got] == [
      (("man", "riding", "horse"), 0.9), (("man", "wearing", "hat"), 1.0),
      (("tree", "near", "horse"), 0.2)]
  assert got[0].provenance == Provenance(
      "2407890", region=(10, 20, 340, 280),
      ref="relationship 15927 (object 1058498 -> object 1058534)")
  assert got[2].provenance.region == (0, 0, 5, 5)
  assert got[2].provenance.ref == "relationship 15929 (object 7 -> object 1058534)"
  # the reference survives a JSON round trip; a triple without one writes no "ref" key
  assert tr.triple_from_json(got[0].to_json()) == got[0]
  assert "ref" not in Triple("a", "b", "c").to_json()["provenance"]


def test_scene_graph_bad_relationship(tmp_path):
  bad = json.loads(json.dumps(VG_GRAPH))
  bad["relationships"][1]["object_id"] = 999
  with pytest.raises(TripleFormatError, match=r"relationships\[1\].*999"):
    scene_graph.scene_graph_triples(bad)
  path = tmp_path / "sg.jsonl"
  path.write_text(json.dumps(bad) + "\n" + json.dumps(VG_GRAPH) + "\n")
  kept, report = scene_graph.read_scene_graphs(path, strict=False)
  assert len(kept) == 5 and report.skipped == 1 and "sg.jsonl:1" in report.errors[0]


# ---------------------------------------------------------------------------- instance graph


def test_instance_graph_filters_and_merges():
  rng = random.Random(random.getrandbits(64))
  ts = [Triple("Men", "riding", "horses", 0.8, "rebel", Provenance("i")),
        Triple("man", "riding", "horse", 0.95, "scene", Provenance("i")),
        Triple("man", "wearing", "hat", 0.49, "scene", Provenance("i")),  # below tau_edge
        Triple("man", "wearing", "hat", 0.5, "rebel", Provenance("i")),  # at tau_edge: kept
        Triple("horse", "is a", "equine", 0.3, "kb:wordnet", Provenance("i"))]  # KB passes
  rng.shuffle(ts)
  g = instance_graph.build_instance_graph(ts, tau_edge=0.5)
  assert isinstance(g, nx.MultiDiGraph)
  got = {(t.key(), t.confidence, t.source) for t in instance_graph.graph_triples(g)}
  assert got == {(("man", "riding", "horse"), 0.95, "scene"),
                 (("man", "wearing", "hat"), 0.5, "rebel"),
                 (("horse", "is a", "equine"), 0.3, "kb:wordnet")}
  assert set(g.successors("man")) == {"horse", "hat"}


def test_instance_graph_keeps_parallel_relations_and_instances():
  ts = [Triple("man", "on", "horse", 0.9, "scene", Provenance("a")),
        Triple("man", "riding", "horse", 0.9, "scene", Provenance("a")),
        Triple("man", "riding", "horse", 0.7, "scene", Provenance("b"))]
  g = instance_graph.build_instance_graph(ts)
  assert g.number_of_edges("man", "horse") == 3
  assert sorted(g["man"]["horse"]) == ["on", "riding", "riding@b"]


REBEL_PATH = os.environ.get("GRAPHLOOM_REBEL_PATH", "")


@pytest.mark.skipif(not REBEL_PATH or not os.path.exists(os.path.join(REBEL_PATH, "config.json")),
                    reason="REBEL weights not available locally: set GRAPHLOOM_REBEL_PATH to a "
                           "transformers folder of Babelscape/rebel-large (nothing is downloaded)")
def test_real_rebel_weights():
  ext = rebel.RebelExtractor(REBEL_PATH)
  text = ("Punta Cana is a resort town in the municipality of Higuey, in La Altagracia "
          "Province, the easternmost province of the Dominican Republic.")
  got, = ext.extract([text], ["doc0"])
  assert any(t.subject == "Punta Cana" for t in got)
  assert all(0 < t.confidence <= 1 and t.provenance.span == (0, len(text)) for t in got)
