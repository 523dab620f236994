"""GraphLoom end to end: question + instance triples -> a verified answer that cites its
evidence. Read top to bottom, this is the system:

  1. instance graph     `pipeline.instance`: triples >= tau_edge, canonical names, KB
                        enrichment (tau_KB, kb_hops), a retrieval pool over the configured index
  2. retrieval          `retrieval.subgraph`: K seeds, bounded 2-hop expansion (d_max, N_max),
                        the interleaved second round (the configured query writer, batched)
  3. correction         `pipeline.correct`: the retrieval evaluator vs tau_eval; below it one
                        action (expansion boost / query reformulation / verbalization repair)
  4. evidence           `pipeline.evidence`: HieraSlot bank + prefix inputs, fixed shapes
  5. decoding           mode "graphloom": the trained heads build the memory; the router picks
                        the active slots at every step inside the decoder's jitted loop
                        (layers >= memory.first_layer, sparse self-KV when memory.sparse);
                        "flat_rag": the same subgraph verbalised into the prompt;
                        "no_retrieval": the question alone. GraphLoom's citations are the
                        slots the router activated at the steps that wrote the answer and its
                        EOS, recorded by the generation loop (equal to a teacher-forced pass
                        over [prompt ; answer ; EOS], which it replaces). Options, when given, are scored by length-normalised
                        log-likelihood under the same conditioning (stage "options").
  6. verification       `pipeline.verify`: atomic claims, entailment by the configured verifier
                        against the evidence (>= tau_ent); when a claim fails, ONE revision
                        conditioned only on the verified evidence (below), verified again; the revision replaces the answer unless the verifier supports it
                        less (Answer.revised says which; a rejected one is in revision_text)
  7. the answer         `pipeline.types.Answer`: text, choice, cited triples (the slots routed at
                        the answer steps, with gates and sources), claims, correction, timings

Verified evidence (what the revision may use): the triples the answer cited (routed at its
answer steps) followed by the best-scored remaining triples of the subgraph, `verify.max_evidence`
in all; the same list is the verifier's premise. The revision's prompt lists only these
triples (`verify.revision_prompt`) and, in GraphLoom mode, its memory holds only their slots.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax import defaults
from graphloom_jax import sharding as sharding_lib
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import embedding_cache
from graphloom_jax.models import heads as heads_lib
# Heads checkpoints live in models/heads.py; these names are also the pipeline's.
from graphloom_jax.models.heads import (ADAPTER_SHAPE_KEYS, HEAD_SHAPE_KEYS, HEADS_DIR,  # noqa: F401
                                        HEADS_FILE, HEADS_META, SHAPE_KEYS, load_heads,
                                        new_heads, save_heads)
from graphloom_jax.models import embedder_from_config, llama
from graphloom_jax.models import router as router_lib
from graphloom_jax.graph.triples import Triple
from graphloom_jax.pipeline import ablation as ablation_lib
from graphloom_jax.pipeline import controls
from graphloom_jax.pipeline import correct as correct_lib
from graphloom_jax.pipeline import decode, evidence as evidence_lib, instance, prompts
from graphloom_jax.pipeline import verify as verify_lib
from graphloom_jax.pipeline.arguments import check_answer_args
from graphloom_jax.pipeline.types import (ALL_MODES, NO_EVIDENCE_MODES, TUNED_MODES, Answer,
                                          CitedTriple, Claim)
from graphloom_jax.retrieval import factory
from graphloom_jax.retrieval import subgraph as sg

# Modes whose decoder reads a trained memory.
MEMORY_MODES = ("graphloom",) + TUNED_MODES


# ------------------------------------------------------------------------------ the system

def _support(claims: Sequence[Claim]) -> float:
  return float(np.mean([c.probability for c in claims])) if claims else 0.0


@dataclasses.dataclass
class Prepared:
  """One question on its way through the stages (after `GraphLoom.prepare`: its instance
  graph, subgraph, correction and evidence)."""
  question: str
  options: list[str] | None
  graph: instance.InstanceGraph | None
  timings: dict[str, float]
  embedding: np.ndarray | None = None
  retriever: sg.BoundedRetriever | None = None
  subgraph: sg.Subgraph | None = None
  correction: Any = None
  evidence: evidence_lib.Evidence | None = None
  prompt: list[int] | None = None
  text: str = ""
  tokens: list[int] | None = None
  cited: list[CitedTriple] = dataclasses.field(default_factory=list)
  option_scores: list[float] | None = None


class GraphLoom:
  """The GraphLoom system around a frozen decoder (see the module docstring).

  Build with `from_pretrained("embedded")` (SmolLM2 + MiniLM + the shipped heads) or
  `from_config(config, heads=DIR)`. `heads=None` allows only the text modes."""

  def __init__(self, config, decoder: decoder_lib.Decoder, embedder, heads=None,
               verifier: verify_lib.Verifier | None = None, writer=None, kb_sources=(),
               wordnet=None, mesh: jax.sharding.Mesh | None = None,
               adapters: dict | None = None):
    """adapters: mode -> the TunedPrefix adapter of a trained text baseline (TUNED_MODES)."""
    self.config = config
    self.decoder = decoder
    # The device mesh of decoding and scoring (graphloom_jax/sharding.py): batches split over
    # "data", the decoder's parameters already placed on it (from_config does), the heads
    # replicated over it here. None: one device. An Explicit-axis mesh is used as its Auto twin.
    self.mesh = mesh = sharding_lib.auto_axes(mesh)
    sharding_lib.check_on_mesh(decoder, mesh)
    if heads is not None:
      sharding_lib.replicate(heads, mesh)
    self.adapters = dict(adapters or {})
    for mode, adapter in self.adapters.items():
      if mode not in TUNED_MODES or not isinstance(adapter, heads_lib.TunedPrefix):
        raise ValueError(f"adapters[{mode!r}]: expected a TunedPrefix for one of {TUNED_MODES}")
      sharding_lib.replicate(adapter, mesh)
    self.embedder = (embedder if isinstance(embedder, embedding_cache.MemoEmbedder)
                     else embedding_cache.MemoEmbedder(embedder))
    self.embed_dim = int(self.embedder.embed(["."]).shape[1])
    self.heads = heads
    self.fmt = prompts.TextFormat.for_decoder(decoder)
    self.writer = writer if writer is not None else factory.query_writer(config, decoder)
    self.verifier = verifier if verifier is not None else self._default_verifier()
    self.kb_sources = list(kb_sources)
    self.wordnet = wordnet
    self.evaluator = correct_lib.RetrievalEvaluator.from_config(config)
    self.selector = correct_lib.CorrectionSelector.from_config(config)
    decode.check_settings(config.decode)
    verify_lib.check_settings(config.verify)
    self.sparse = llama.SparseSpec.from_config(config.memory)
    self.first_layer = config.memory.first_layer
    self.subgraph_config = sg.SubgraphConfig.from_config(config.retrieval)
    self.ablation = ablation_lib.Ablation.from_config(config)
    evidence_lib.subgraph_keys(config.fusion.objects)  # fusion.objects is a known source
    self.prompt_style = config.baseline.prompt
    if self.prompt_style not in prompts.STYLES:
      raise ValueError(f"config.baseline.prompt={self.prompt_style!r}; expected one of "
                       f"{prompts.STYLES}")
    self._backbone_def, self._backbone_state = nnx.split(decoder.model)
    # What decoding calls per memory mode: the trained heads (with the -router / -prefix
    # switches), and each trained text baseline's adapter.
    self._mode_heads = {mode: (a, *nnx.split(a)) for mode, a in self.adapters.items()}
    if heads is not None:
      self.decode_heads = (ablation_lib.AblatedHeads(heads, self.ablation)
                           if self.ablation.changes_heads else heads)
      self._heads_def, self._heads_state = nnx.split(self.decode_heads)
      self._mode_heads["graphloom"] = (self.decode_heads, self._heads_def, self._heads_state)

  def _default_verifier(self):
    """The judge config.verify.judge names ("decoder", "decoder_calibrated", "graph" or
    "nli:<folder>"; `verify.from_config`), over this decoder and its prompt tokenizer."""
    return verify_lib.from_config(self.config.verify, self.decoder, self.fmt.tok)

  @classmethod
  def from_config(cls, config, heads: str | None = None,
                  mesh: jax.sharding.Mesh | None = None, adapters: dict | None = None,
                  **kwargs) -> "GraphLoom":
    """Decoder and embedder as `config` names them; `heads` a folder written by `save_heads`
    (or by `launch.train`'s export), None for the text modes only. The device mesh is
    `mesh`, else the one config.mesh selects (`sharding.mesh_from_config`; 1 x 1 = none); the
    decoder's parameters are loaded onto it (split over "model" by llama.PARTITIONS)."""
    mesh = sharding_lib.mesh_from_config(config) if mesh is None else mesh
    dec = decoder_lib.from_config(config.model, mesh)
    emb = embedding_cache.MemoEmbedder(embedder_from_config(config.embedder))
    width = int(emb.embed(["."]).shape[1])
    loaded = None
    if heads is not None:
      loaded = load_heads(heads, config, dec, width, kind="graphloom")
    tuned = {mode: load_heads(folder, config, dec, width, kind="tuned_prefix")
             for mode, folder in (adapters or {}).items()}
    return cls(config, dec, emb, loaded, mesh=mesh, adapters=tuned, **kwargs)

  @classmethod
  def from_pretrained(cls, name: str = "embedded", **kwargs) -> "GraphLoom":
    """A model shipped with the package (PRETRAINED): SmolLM2-135M-Instruct and
    all-MiniLM-L6-v2 with heads trained on
      "embedded": SceneKB (graphloom_jax/resources/heads/smollm2/README.md);
      "pathquestion": PathQuestion PQL-3H, open answers
        (graphloom_jax/resources/heads/pathquestion/README.md).
    The trained text baselines shipped beside the heads (`adapters/<mode>/`, e.g. mode
    "flat_rag_tuned") are loaded too; `adapters=` adds to or replaces them."""
    if name not in PRETRAINED:
      raise ValueError(f"GraphLoom.from_pretrained: unknown name {name!r}; shipped: "
                       f"{', '.join(PRETRAINED)} (use from_config for others)")
    config, folder = PRETRAINED[name]
    adapters = {**shipped_adapters(HEADS_DIR / folder), **(kwargs.pop("adapters", None) or {})}
    return cls.from_config(config(), heads=str(HEADS_DIR / folder), adapters=adapters, **kwargs)

  # ---------------------------------------------------------------- stage 1

  def instance_graph(self, triples, *, objects: Sequence[str] | None = None,
                     instance_id: str = "") -> instance.InstanceGraph:
    """Stage 1 (cache the result per image: it does not depend on the question)."""
    return instance.build(triples, config=self.config, embedder=self.embedder,
                          kb_sources=self.kb_sources, objects=objects, instance_id=instance_id)

  # ---------------------------------------------------------------- answering

  def answer(self, question: str, triples, *, objects: Sequence[str] | None = None,
             options: Sequence[str] | None = None, mode: str = "graphloom") -> Answer:
    """Answers one question from its triples (Triple records, a VG-style scene graph dict, or
    an InstanceGraph from `instance_graph`)."""
    return self.answer_batch([question], [triples], objects=None if objects is None
                             else [objects], options=None if options is None else [options],
                             mode=mode)[0]

  def answer_batch(self, questions: Sequence[str], triples: Sequence, *,
                   objects: Sequence | None = None, options: Sequence | None = None,
                   mode: str = "graphloom", evidence: Sequence | None = None) -> list[Answer]:
    """`answer` for many questions, decoding them as one batch.

    evidence: per question, the triples to read instead of the retrieved subgraph (retrieval
    and correction are skipped; `pipeline.controls` builds the shuffled, empty and oracle
    evidence of the controls), or None to retrieve."""
    check_answer_args(questions, triples, objects=objects, options=options, mode=mode)
    items = self._items(questions, triples, objects, options, mode)
    if evidence is not None:
      if len(evidence) != len(items):
        raise ValueError(f"answer_batch: {len(evidence)} evidence lists for {len(items)} "
                         "questions")
      if any(it.graph is None for it in items):
        raise ValueError("answer_batch: evidence= replaces retrieval from an instance graph; "
                         "give every question its triples")
      self._given_evidence(items, evidence)
    elif all(it.graph is not None for it in items):
      self._prepare(items)
    if mode == "routed_text":
      self._route_text(items)
    self._decode(items, mode)
    self._score_options(items, mode)
    answers = self._verify(items, mode)
    return answers

  def prepare(self, questions: Sequence[str], triples: Sequence, *,
              objects: Sequence | None = None, gold: Sequence | None = None) -> list[Prepared]:
    """Stages 1-4 for many questions: what the decoder will read. Training featurisation
    calls this too (with `gold`, each question's supporting triples, for the slot utility
    labels), so training and answering route over the same slots."""
    items = self._items(questions, triples, objects, None, "graphloom", need_heads=False)
    self._prepare(items, gold)
    return items

  def _prepare(self, items: list[Prepared], gold: Sequence | None = None) -> None:
    self._retrieve(items)
    self._correct(items)
    self._evidence(items, gold)

  def _items(self, questions, triples, objects, options, mode, need_heads: bool = True
             ) -> list[Prepared]:
    if mode not in ALL_MODES:
      raise ValueError(f"mode={mode!r}; expected one of {ALL_MODES}")
    if mode in ("graphloom", "routed_text") and need_heads and self.heads is None:
      raise ValueError(f"mode={mode!r} needs trained heads: build with from_pretrained or "
                       "from_config(config, heads=DIR)")
    if mode in TUNED_MODES and mode not in self.adapters:
      raise ValueError(f"mode={mode!r} needs its trained adapter: from_config(config, "
                       f"adapters={{{mode!r}: DIR}}) with DIR from launch.train "
                       f"--config.train.target={mode}")
    if isinstance(questions, str):
      raise TypeError("answer_batch takes a list of questions; use answer() for one")
    n = len(questions)
    if n == 0:
      raise ValueError("answer_batch: no questions given")
    for name, seq in (("triples", triples), ("objects", objects), ("options", options)):
      if seq is not None and len(seq) != n:
        raise ValueError(f"answer_batch: {len(seq)} {name} lists for {n} questions")
    items = []
    for i, q in enumerate(questions):
      if not isinstance(q, str) or not q.strip():
        raise ValueError(f"question {i} is empty")
      opts = None
      if options is not None and options[i] is not None:
        opts = list(options[i])
        if len(opts) < 2:
          raise ValueError(f"question {i} ({q!r}): give at least 2 options, got {len(opts)}")
        for j, o in enumerate(opts):
          if not isinstance(o, str) or not o.strip():
            raise ValueError(f"question {i} ({q!r}): option {j} is empty")
      t0 = time.perf_counter()
      tr = triples[i] if triples is not None else None
      if isinstance(tr, instance.InstanceGraph):
        graph = tr
      elif tr is None or (mode in NO_EVIDENCE_MODES and not tr):
        if mode not in NO_EVIDENCE_MODES:
          raise ValueError(f"question {i} ({q!r}): no triples given; mode={mode!r} retrieves "
                           "from them (mode='no_retrieval' answers without)")
        graph = None
      else:
        try:
          graph = self.instance_graph(tr, objects=None if objects is None else objects[i])
        except ValueError as e:
          raise ValueError(f"question {i} ({q!r}): {e}") from None
      items.append(Prepared(q.strip(), opts, graph, {"instance_graph": time.perf_counter() - t0}))
    return items

  def _given_evidence(self, items: list[Prepared], evidence: Sequence) -> None:
    """Stages 2-4 with the subgraph given: each question reads `evidence[i]` (Triples, scored
    by their cosine to the question as retrieval scores its edges) as if retrieved."""
    vecs = self.embedder.embed([it.question for it in items])
    for i, (it, v, given) in enumerate(zip(items, vecs, evidence)):
      t0 = time.perf_counter()
      given = list(given)
      if not all(isinstance(t, Triple) for t in given):
        raise TypeError(f"evidence of question {i} must be a list of Triple")
      it.embedding = v
      it.subgraph = controls.as_subgraph(given, v, self.embedder)
      it.timings["retrieval"] = time.perf_counter() - t0
      it.timings["correction"] = 0.0
    self._evidence(items)

  def _retrieve(self, items: list[Prepared]) -> None:
    t0 = time.perf_counter()
    vecs = self.embedder.embed([it.question for it in items])
    embed_seconds = (time.perf_counter() - t0) / len(items)
    retrievers = [sg.BoundedRetriever(it.graph.pool, self.embedder, self.subgraph_config,
                                      query_writer=self.writer) for it in items]
    subs = sg.retrieve_batch(retrievers, [it.question for it in items], list(vecs), self.writer)
    for it, r, v, s in zip(items, retrievers, vecs, subs):
      it.retriever, it.embedding, it.subgraph = r, v, s
      it.timings["retrieval"] = embed_seconds + s.timings["total"]

  def _correct(self, items: list[Prepared]) -> None:
    if not self.ablation.corrective:  # -corrective: the first subgraph is the evidence
      for it in items:
        it.timings["correction"] = 0.0
      return
    for it in items:
      t0 = time.perf_counter()
      it.subgraph, it.correction = correct_lib.correct(
          it.question, it.embedding, it.subgraph, it.retriever, self.embedder, self.writer, self.evaluator,
          self.selector, self.config, self.wordnet)
      it.timings["correction"] = time.perf_counter() - t0

  def _evidence(self, items: list[Prepared], gold: Sequence | None = None) -> None:
    for j, it in enumerate(items):
      t0 = time.perf_counter()
      n_ev = self.config.memory.bank_size // 2
      objects = evidence_lib.prefix_objects(self.config.fusion.objects, it.graph.objects,
                                            it.subgraph.edges[:n_ev])
      it.evidence = evidence_lib.build(
          it.question, it.embedding, it.subgraph, objects, self.embedder,
          bank_size=self.config.memory.bank_size, max_objects=self.config.fusion.max_objects,
          tokenize=self.fmt.tok.encode, gold=gold[j] if gold is not None else ())
      it.timings["evidence"] = time.perf_counter() - t0

  # ---------------------------------------------------------------- decoding

  def _arrays(self, items: list[Prepared]) -> dict[str, np.ndarray]:
    """The items' stacked evidence arrays as the router will read them (features dropped by
    ablation.drop_features neutralised)."""
    return ablation_lib.neutralise(evidence_lib.stack([it.evidence for it in items]),
                                   self.ablation)

  def _memory(self, arrays: dict[str, np.ndarray], mode: str = "graphloom"):
    heads = self._mode_heads[mode][0]
    batch = {k: jnp.asarray(v) for k, v in arrays.items()}
    mem, inputs = heads.memory(batch, self.decoder.dtype)
    return mem, router_lib.bound_router(heads.router, inputs)

  def _mode_arrays(self, items: list[Prepared], mode: str) -> dict[str, np.ndarray]:
    """What a memory mode's heads read: GraphLoom the evidence arrays, an adapter only the
    batch size."""
    if mode == "graphloom":
      return self._arrays(items)
    return {"example": np.zeros((len(items), 1), np.float32)}

  def _fit(self, it: Prepared, make_ids, lines: Sequence[str]) -> tuple[list[int], int]:
    """Prompt ids from `make_ids(lines[:n])` with the largest n whose prompt leaves room for
    decode.max_new_tokens in the decoder's context (evidence in the prompt is cut from its end,
    the lowest-scored triples first), and that n."""
    room = self.decoder.max_seq_len - self.config.decode.max_new_tokens
    n = len(lines)
    ids = make_ids(lines)
    while len(ids) > room and n > 0:
      n -= 1
      ids = make_ids(lines[:n])
    if len(ids) > room:
      raise ValueError(f"question {it.question!r}: its prompt has {len(ids)} tokens, more than "
                       f"the {room} the decoder's context of {self.decoder.max_seq_len} leaves "
                       f"for decode.max_new_tokens={self.config.decode.max_new_tokens}")
    return ids, n

  def _prompt(self, it: Prepared, mode: str) -> list[int]:
    """GraphLoom and the trained text baselines: the prompt they were trained with; the text
    modes: baseline.prompt's style; Flat-RAG (and its trained variant) with the subgraph's
    triples, routed_text with the routed ones (`prompts.mode_prompt_ids`)."""
    lines = []
    if mode in ("flat_rag", "flat_rag_tuned"):
      lines = [f"{t.verbalize()}." for t in it.evidence.triples]
    elif mode == "routed_text":
      lines = [f"{c.triple.verbalize()}." for c in it.cited]
    return self._fit(it, lambda ls: prompts.mode_prompt_ids(self.fmt, mode, it.question, ls,
                                                            self.prompt_style), lines)[0]

  def _route_text(self, items: list[Prepared]) -> None:
    """-KG-JSA++ (mode routed_text): the slots the router activates at the first answer step of
    GraphLoom's own prompt, as cited triples (their verbalisations become the text evidence)."""
    t0 = time.perf_counter()
    for it in items:
      it.prompt = self._prompt(it, "graphloom")
    _, gates, active, rows = self._score(items, "graphloom", [[""] for _ in items])
    seconds = (time.perf_counter() - t0) / len(items)
    for j, it in enumerate(items):
      first = int(np.argmax(rows["loss_mask"][j]))
      it.cited = self._citations(it, gates[j][first:first + 1], active[j][first:first + 1])
      it.timings["decoding"] = seconds

  def _generate(self, prompt_ids: list[list[int]], mode: str, arrays=None,
                return_routing: bool = False):
    kwargs = {}
    if mode in MEMORY_MODES:
      kwargs = dict(arrays=arrays, memory_fn=lambda a: self._memory(a, mode),
                    first_layer=self.first_layer, sparse=self.sparse,
                    return_routing=return_routing)
    elif self.sparse is not None:
      kwargs = dict(sparse=self.sparse)
    return decode.generate(self.decoder, prompt_ids, self.config.decode.max_new_tokens,
                           mesh=self.mesh, **kwargs)

  def _decode(self, items: list[Prepared], mode: str, arrays=None) -> None:
    """Generates each item's answer; in GraphLoom mode also cites the slots routed while
    generating it (the gates and active sets of the steps that wrote the answer and its EOS)."""
    t0 = time.perf_counter()
    for it in items:
      it.prompt = self._prompt(it, mode)
    if arrays is None and mode in MEMORY_MODES:
      arrays = self._mode_arrays(items, mode)
    cite = mode == "graphloom"
    outs = self._generate([it.prompt for it in items], mode, arrays, return_routing=cite)
    routes = [None] * len(items)
    if cite:
      outs, routes = outs
    for it, ids, route in zip(items, outs, routes):
      it.tokens, it.text = ids, self.fmt.decode(ids)
      if route is not None:
        it.cited = self._citations(it, route[1], route[0])
    seconds = (time.perf_counter() - t0) / len(items)
    for it in items:
      it.timings["decoding"] = it.timings.get("decoding", 0.0) + seconds

  def _rows(self, items: list[Prepared], texts_per_item: list[list[str]]):
    """[prompt ; text ; EOS] rows for every (item, text), one length bucket."""
    ids = [[it.prompt + self.fmt.answer_ids(t) for t in texts]
           for it, texts in zip(items, texts_per_item)]
    length = prompts.bucket(max(len(r) for rows in ids for r in rows))
    rows = [prompts.token_row(r, len(it.prompt), length, self.fmt.pad, f"question {it.question!r}")
            for it, rs in zip(items, ids) for r in rs]
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}

  def _score(self, items: list[Prepared], mode: str, texts: list[list[str]]):
    """Per (item, text), in order: the text's mean token log-likelihood [N] (text + EOS) after
    the item's prompt under the mode's conditioning; in GraphLoom mode also the router's gates
    and active set [N, T, M] and the [prompt ; text ; EOS] rows they index (else None)."""
    if mode not in MEMORY_MODES:  # each prompt prefilled once, its options continue its cache
      lp = decode.score_text_options(
          self._backbone_def, self._backbone_state, [it.prompt for it in items],
          [[self.fmt.answer_ids(t) for t in ts] for ts in texts], self.fmt.pad, mesh=self.mesh)
      return lp, None, None, None
    rows = self._rows(items, texts)
    arrays = decode.repeat_rows(self._mode_arrays(items, mode), [len(t) for t in texts])
    batch = {k: jnp.asarray(v) for k, v in {**arrays, **rows}.items()}
    _, heads_def, heads_state = self._mode_heads[mode]
    lp, gates, active = decode.score_rows(heads_def, heads_state,
                                          self._backbone_def, self._backbone_state, batch,
                                          first_layer=self.first_layer, mesh=self.mesh)
    return np.asarray(lp), np.asarray(gates), np.asarray(active), rows

  def _score_options(self, items: list[Prepared], mode: str) -> None:
    """Option log-likelihoods (multiple choice), under the same conditioning as the answer."""
    t0 = time.perf_counter()
    texts = [it.options or [] for it in items]
    if any(texts) and mode in MEMORY_MODES:  # each prompt read once, its options continue it
      _, heads_def, heads_state = self._mode_heads[mode]
      lp = decode.score_options(
          heads_def, heads_state, self._backbone_def, self._backbone_state,
          self._mode_arrays(items, mode), [it.prompt for it in items],
          [[self.fmt.answer_ids(t) for t in ts] for ts in texts], self.fmt.pad,
          first_layer=self.first_layer, mesh=self.mesh)
    elif any(texts):
      lp, *_ = self._score(items, mode, texts)
    if any(texts):
      start = 0
      for it, opts in zip(items, texts):
        if opts:
          it.option_scores = [float(x) for x in lp[start:start + len(opts)]]
        start += len(opts)
    seconds = (time.perf_counter() - t0) / len(items)
    for it in items:
      it.timings["options"] = seconds if any(texts) else 0.0

  def _citations(self, it: Prepared, gates: np.ndarray, active: np.ndarray) -> list[CitedTriple]:
    """The triples of the slots routed at the answer steps (gates/active [steps, M]), each with
    its largest gate there, best first."""
    index = it.evidence.arrays["slot_triple"]
    is_entity = it.evidence.arrays["slot_is_entity"]
    best: dict[int, tuple[float, str]] = {}
    for m in np.flatnonzero(active.any(axis=0)):
      g = float(gates[:, m][active[:, m]].max())
      i = int(index[m])
      if i >= 0 and (i not in best or g > best[i][0]):
        best[i] = (g, "entity" if is_entity[m] else "relation")
    order = sorted(best, key=lambda i: (-best[i][0], i))
    return [CitedTriple(it.evidence.triples[i], best[i][0], best[i][1],
                        float(it.evidence.scores[i])) for i in order]

  # ---------------------------------------------------------------- verification + revision

  def _verified_evidence(self, it: Prepared) -> list[int]:
    """Rows of it.evidence.triples the verifier reads and a revision may use."""
    if it.evidence is None:
      return []
    cited = [it.evidence.triples.index(c.triple) for c in it.cited]
    rest = [i for i in range(len(it.evidence.triples)) if i not in cited]
    return (cited + rest)[:self.config.verify.max_evidence]

  def _check(self, it: Prepared, lines: list[str]) -> list[Claim]:
    try:
      return verify_lib.verify(it.question, it.text, lines, self.verifier,
                               self.config.verify.tau_ent)
    except RuntimeError as e:
      raise RuntimeError(f"verification of question {it.question!r} failed: {e}") from e

  def _verify(self, items: list[Prepared], mode: str) -> list[Answer]:
    out = []
    revise = []
    for it in items:
      t0 = time.perf_counter()
      rows = self._verified_evidence(it)
      lines = [it.evidence.triples[i].verbalize() for i in rows]
      claims = self._check(it, lines)
      it.timings["verification"] = time.perf_counter() - t0
      answer = Answer(it.question, mode, it.text, option_scores=it.option_scores,
                      choice=int(np.argmax(it.option_scores)) if it.option_scores else None,
                      evidence=it.cited, claims=claims, correction=it.correction,
                      retrieved=list(it.subgraph.edges) if it.subgraph else [],
                      timings=it.timings,
                      prompt_tokens=len(it.prompt) if it.prompt is not None else None)
      if (self.config.verify.revise and mode not in NO_EVIDENCE_MODES and lines
          and not answer.supported):
        revise.append((it, answer, rows, lines))
      out.append(answer)
    if revise:
      self._revise(revise, mode)
    for it, answer in zip(items, out):
      it.timings.setdefault("revision", 0.0)
      answer.timings = dict(it.timings)
    return out

  def _revise(self, todo, mode: str) -> None:
    """One evidence-bound revision of each failed answer, verified once more (never again)."""
    t0 = time.perf_counter()
    items = [it for it, *_ in todo]
    prompt_ids, keep = [], []
    for it, answer, rows, lines in todo:
      failed = [c.text for c in answer.claims if not c.supported]
      ids, n = self._fit(it, lambda ls: self.fmt.text_ids(
          verify_lib.revision_prompt(it.question, ls, failed)), lines)
      prompt_ids.append(ids)
      keep.append(set(rows[:n]))
    arrays = self._mode_arrays(items, mode) if mode in TUNED_MODES else None
    if mode == "graphloom":
      arrays = self._arrays(items)
      # Only the verified triples' slots stay valid in the revision's memory.
      index = arrays["slot_triple"]
      allowed = np.array([[i in k for i in row] for row, k in zip(index, keep)])
      arrays["slot_valid"] = arrays["slot_valid"] & allowed
    outs = self._generate(prompt_ids, mode, arrays)
    seconds = (time.perf_counter() - t0) / len(items)
    for (it, answer, rows, lines), ids in zip(todo, outs):
      t1 = time.perf_counter()
      first_text, first_claims = answer.text, answer.claims
      answer.first_text, answer.revised = first_text, True
      it.text = self.fmt.decode(ids)
      claims = self._check(it, lines)
      # The revision replaces the answer unless the verifier supports it less (mean entailment
      # of its claims); a revision that says nothing never replaces an answer.
      if claims and _support(claims) >= _support(first_claims):
        answer.text, answer.claims = it.text, claims
      else:
        it.text = first_text
        answer.revision_text, answer.revised = self.fmt.decode(ids), False
      it.timings["revision"] = seconds + time.perf_counter() - t1


def shipped_adapters(folder: pathlib.Path) -> dict[str, str]:
  """mode -> folder of each trained text baseline under `folder/adapters/` (TUNED_MODES
  only; another name there is an error, not a silent skip)."""
  root = folder / "adapters"
  if not root.is_dir():
    return {}
  out = {}
  for sub in sorted(p for p in root.iterdir() if p.is_dir()):
    if sub.name not in TUNED_MODES:
      raise ValueError(f"{sub}: not a trained text baseline's mode (expected one of "
                       f"{TUNED_MODES})")
    out[sub.name] = str(sub)
  return out


# from_pretrained's names: (config, heads folder under resources/heads).
PRETRAINED = {"embedded": (defaults.embedded_config, "smollm2"),
              "pathquestion": (defaults.pathquestion_config, "pathquestion")}
