"""The GRAIL retriever: unified alignment adapters, four query strategies, the hybrid selector.

Shapes: B queries, E evidence slots per query (padded, -1 = empty), P pool items, D width,
M modalities, F selector features.

Methods (`METHODS`), each a way of turning a question vector q and a partial evidence set into
one search vector:
  query     q                                       (no steering)
  additive  q + h_ctx                               (the additive baseline)
  grail     q - g (q . h_ctx / ||h_ctx||^2) h_ctx   (gap-aware subtraction, learned gate g)
  hybrid    grail or additive per query, chosen by the self-supervised selector

Unified alignment: each modality m (question, text, table, image; see grail_data.MODALITIES)
has a residual linear adapter a_m(x) = normalize(x + x W_m + b_m) into the shared space.
W_m = 0 and b_m = 0 at initialisation, so an untrained retriever searches the raw embedder
space. All search is cosine similarity between adapted, unit-norm vectors.

Hybrid selector: logistic regression on `selector_features` (the adapted question, h_ctx and
statistics of the evidence set); its label on training data is whether subtraction ranks the
missing evidence higher than addition (`fit_selector`).

Parameters are a plain pytree {'gate', 'adapters', optional 'selector'}; `save` / `load` write
it with orbax beside a JSON `GrailConfig`.

Public API:
  GrailRetriever(params, cfg, pool_vectors [P,D], pool_modality [P])
    .encode_queries(q_raw [B,D]) -> q [B,D];  .steer(q, context_ids [B,E], method) -> [B,D]
    .search(q, context_ids, method, k) -> (ids [B,k], scores [B,k])   (context skipped)
    .ranks(q, context_ids, targets [B], method) -> 1-based ranks [B] over the whole pool
  GrailQueryWriter(params, cfg, method)     second-round strategy for subgraph.BoundedRetriever
  second_round_writer(config)               that writer when retrieval.second_round == 'grail'
  init_params, adapt, steer, selector_features, fit_selector, save, load
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from graphloom_jax import atomic
from graphloom_jax.ops import steering
from graphloom_jax.retrieval import grail_data

METHODS = ("query", "additive", "grail", "hybrid")
CONFIG_FILE = "grail_config.json"
# Pool items are adapted in chunks so that the [chunk, M, D] intermediate stays small.
ADAPT_CHUNK = 8192


@dataclasses.dataclass(frozen=True)
class GrailConfig:
  dim: int = 384
  tau: float = 0.1  # temperature of the query-weighted context attention
  gate: str = "scalar"  # "scalar" (the paper) or "vector" (one gate per dimension)
  modalities: tuple[str, ...] = grail_data.MODALITIES

  def __post_init__(self):
    if self.gate not in ("scalar", "vector"):
      raise ValueError(f"GrailConfig.gate must be 'scalar' or 'vector', got {self.gate!r}")
    if self.tau <= 0:
      raise ValueError(f"GrailConfig.tau must be > 0, got {self.tau}")
    if "query" not in self.modalities:
      raise ValueError(f"GrailConfig.modalities must include 'query', got {self.modalities}")

  @property
  def query_modality(self) -> int:
    return self.modalities.index("query")

  @property
  def num_features(self) -> int:
    return 2 * self.dim + len(_SCALAR_FEATURES) + len(self.modalities)


def init_params(key, cfg: GrailConfig) -> dict:
  m, d = len(cfg.modalities), cfg.dim
  return {"gate": steering.init_gate(key, d, cfg.gate),
          "adapters": {"w": jnp.zeros((m, d, d), jnp.float32),
                       "b": jnp.zeros((m, d), jnp.float32)}}


@jax.jit
def adapt(adapters, x, modality):
  """a_m(x) for each row: x [N,D], modality int [N] -> unit rows [N,D]."""
  onehot = jax.nn.one_hot(modality, adapters["w"].shape[0], dtype=x.dtype)  # [N,M]
  delta = jnp.einsum("ND,MDE->NME", x, adapters["w"]) + adapters["b"][None]
  return steering.l2_normalize(x + jnp.einsum("NM,NME->NE", onehot, delta))


def adapt_pool(adapters, vectors: np.ndarray, modality: np.ndarray) -> np.ndarray:
  """`adapt` over a whole pool, chunked (the last chunk is padded to keep one compilation)."""
  out = np.empty(vectors.shape, np.float32)
  for s in range(0, len(vectors), ADAPT_CHUNK):
    x, m = vectors[s:s + ADAPT_CHUNK], modality[s:s + ADAPT_CHUNK]
    n = len(x)
    if len(vectors) > ADAPT_CHUNK and n < ADAPT_CHUNK:
      x = np.pad(x, ((0, ADAPT_CHUNK - n), (0, 0)))
      m = np.pad(m, (0, ADAPT_CHUNK - n))
    out[s:s + n] = np.asarray(adapt(adapters, x, m))[:n]
  return out


# Scalar selector features, in order (documented for whoever inspects a trained selector).
# The evidence count is absolute, not a fraction of E, so that a selector fitted on E = 8
# context slots reads a sequential pool of K slots the same way.
_SCALAR_FEATURES = ("q.h", "|h|", "n_evidence", "max q.e", "mean q.e", "evidence redundancy",
                    "attention entropy", "mean gate", "cos(q_gap, q)", "cos(q_gap, q+h)")


@functools.partial(jax.jit, static_argnames=("tau", "num_modalities"))
def selector_features(gate, q, ev, mask, ev_modality, *, tau, num_modalities):
  """[B,F]: q, h_ctx, the `_SCALAR_FEATURES` and the evidence modality histogram."""
  mask = mask.astype(bool)
  a = steering.context_weights(q, ev, mask, tau)
  h = jnp.einsum("BE,BED->BD", a, ev)
  g = steering.gap_gate(gate, q, h)
  q_gap = steering.subtractive_steer(q, h, g)
  q_add = steering.additive_steer(q, h)
  mf = mask.astype(q.dtype)
  n = jnp.sum(mf, -1)
  n_safe = jnp.maximum(n, 1.0)
  sims = jnp.einsum("BD,BED->BE", q, ev)
  pair = jnp.einsum("BED,BFD->BEF", ev, ev) * mf[:, :, None] * mf[:, None, :]
  n_pairs = jnp.maximum(n * (n - 1), 1.0)
  redundancy = (jnp.sum(pair, (-1, -2)) - jnp.sum(mf, -1)) / n_pairs  # off-diagonal mean
  entropy = -jnp.sum(jnp.where(a > 0, a * jnp.log(jnp.where(a > 0, a, 1.0)), 0.0), -1)
  cos = lambda x, y: jnp.sum(steering.l2_normalize(x) * steering.l2_normalize(y), -1)
  scalars = jnp.stack([
      jnp.sum(q * h, -1), jnp.linalg.norm(h, axis=-1), n,
      jnp.max(jnp.where(mask, sims, -1.0), -1) * (n > 0), jnp.sum(sims * mf, -1) / n_safe,
      redundancy, entropy, g.reshape(g.shape[0], -1).mean(-1), cos(q_gap, q), cos(q_gap, q_add),
  ], -1)
  hist = jnp.einsum("BE,BEM->BM", mf, jax.nn.one_hot(ev_modality, num_modalities)) / n_safe[:, None]
  return jnp.concatenate([q, h, scalars, hist], -1)


@jax.jit
def selector_logit(selector, features):
  """Logit of 'subtractive ranks the missing evidence higher' for features [B,F] -> [B]."""
  x = (features - selector["mean"]) / selector["std"]
  return x @ selector["w"] + selector["b"]


def fit_selector(features: np.ndarray, labels: np.ndarray, *, steps: int = 300,
                 learning_rate: float = 1e-2, l2: float = 1e-3) -> dict:
  """Logistic regression of labels (1 = subtractive wins) on features [N,F]; class-balanced,
  L2-penalised, full-batch Adam from zero weights (deterministic). Returns the selector
  pytree."""
  features = np.asarray(features, np.float32)
  labels = np.asarray(labels, np.float32)
  if features.ndim != 2 or len(features) != len(labels) or len(labels) == 0:
    raise ValueError(f"fit_selector needs features [N,F] and labels [N] with N > 0, got "
                     f"{features.shape} and {labels.shape}")
  mean = features.mean(0)
  std = features.std(0) + 1e-6
  pos = labels.mean()
  # Balanced weights: the selector should learn when each specialist wins, not the base rate.
  weights = np.where(labels > 0, 0.5 / max(pos, 1e-6), 0.5 / max(1 - pos, 1e-6)).astype(np.float32)
  params = {"w": jnp.zeros((features.shape[1],), jnp.float32), "b": jnp.zeros((), jnp.float32)}
  tx = optax.adam(learning_rate)
  opt = tx.init(params)
  x = jnp.asarray((features - mean) / std)
  y, wt = jnp.asarray(labels), jnp.asarray(weights)

  @jax.jit
  def step(params, opt):
    def loss(p):
      logit = x @ p["w"] + p["b"]
      return jnp.mean(wt * optax.sigmoid_binary_cross_entropy(logit, y)) + l2 * jnp.sum(p["w"] ** 2)
    grads = jax.grad(loss)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt

  for _ in range(steps):
    params, opt = step(params, opt)
  return {"mean": jnp.asarray(mean), "std": jnp.asarray(std), **params}


@functools.partial(jax.jit, static_argnames=("method", "tau", "num_modalities"))
def steer(params, q, ev, mask, ev_modality, *, method, tau, num_modalities):
  """The search vector [B,D] of `method` for adapted questions q [B,D] and adapted evidence
  ev [B,E,D] (mask [B,E], ev_modality [B,E] used by the hybrid selector)."""
  if method == "query":
    return q
  h = steering.context_vector(q, ev, mask, tau)
  if method == "additive":
    return steering.additive_steer(q, h)
  q_gap = steering.subtractive_steer(q, h, steering.gap_gate(params["gate"], q, h))
  if method == "grail":
    return q_gap
  if method == "hybrid":
    feats = selector_features(params["gate"], q, ev, mask, ev_modality, tau=tau,
                              num_modalities=num_modalities)
    use_sub = selector_logit(params["selector"], feats) >= 0.0
    return jnp.where(use_sub[:, None], steering.l2_normalize(q_gap),
                     steering.l2_normalize(steering.additive_steer(q, h)))
  raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def save(directory, params: dict, cfg: GrailConfig) -> pathlib.Path:
  """Writes params (orbax) and cfg (JSON) under directory; returns its absolute path.

  The folder is built beside its target and swapped in (`atomic.atomic_dir`): a failed or
  killed save leaves the previous checkpoint. A folder holding anything but a GRAIL checkpoint
  is refused, since the save replaces the whole folder."""
  directory = pathlib.Path(directory).absolute()
  if directory.is_dir() and any(directory.iterdir()) and not (directory / CONFIG_FILE).is_file():
    raise FileExistsError(f"refusing to save a GRAIL checkpoint to {directory}: the folder holds "
                          f"other files and no {CONFIG_FILE}, and a save replaces the whole folder")
  meta = dataclasses.asdict(cfg)
  meta["has_selector"] = "selector" in params
  with atomic.atomic_dir(directory) as tmp:
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(tmp / "params", jax.tree.map(np.asarray, params), force=True)
    ckpt.wait_until_finished()
    (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=1))
  return directory


def load(directory) -> tuple[dict, GrailConfig]:
  directory = pathlib.Path(directory).absolute()
  cfg_path = directory / CONFIG_FILE
  if not cfg_path.is_file() or not (directory / "params").is_dir():
    raise FileNotFoundError(f"{directory} is not a GRAIL checkpoint (expected {CONFIG_FILE} and "
                            f"params/ written by grail.save)")
  meta = json.loads(cfg_path.read_text())
  has_selector = meta.pop("has_selector")
  meta["modalities"] = tuple(meta["modalities"])
  try:
    cfg = GrailConfig(**meta)
  except TypeError as e:
    raise ValueError(f"{cfg_path}: {e}") from None
  target = jax.eval_shape(lambda: init_params(jax.random.key(0), cfg))
  if has_selector:
    f = cfg.num_features
    target["selector"] = {k: jax.ShapeDtypeStruct(s, jnp.float32)
                          for k, s in (("mean", (f,)), ("std", (f,)), ("w", (f,)), ("b", ()))}
  params = ocp.StandardCheckpointer().restore(directory / "params", target)
  return jax.tree.map(jnp.asarray, params), cfg


class GrailRetriever:
  """Searches an adapted evidence pool with any of `METHODS`.

  pool_vectors [P,D] and pool_modality [P] are the raw embedder vectors and modality ids; the
  retriever adapts them once. Context sets are pool ids [B,E] padded with -1.
  """

  def __init__(self, params: dict, cfg: GrailConfig, pool_vectors: np.ndarray,
               pool_modality: np.ndarray, index_factory=None):
    pool_vectors = np.asarray(pool_vectors, np.float32)
    pool_modality = np.asarray(pool_modality, np.int32)
    if pool_vectors.ndim != 2 or pool_vectors.shape[1] != cfg.dim:
      raise ValueError(f"pool_vectors must be [P, {cfg.dim}], got {pool_vectors.shape}")
    if pool_modality.shape != (len(pool_vectors),):
      raise ValueError(f"pool_modality must be [{len(pool_vectors)}], got {pool_modality.shape}")
    bad = (pool_modality < 0) | (pool_modality >= len(cfg.modalities))
    if bad.any():
      raise ValueError(f"pool_modality[{int(np.argmax(bad))}] = {pool_modality[bad][0]} is not a "
                       f"modality index of {cfg.modalities}")
    self.params, self.cfg = params, cfg
    self.pool_modality = pool_modality
    self.pool = adapt_pool(params["adapters"], pool_vectors, pool_modality)
    self._index_factory = index_factory

  @functools.cached_property
  def index(self):
    """The search index over the adapted pool (built on first use; ExactIndex by default)."""
    if self._index_factory is None:
      from graphloom_jax.retrieval import index as index_lib
      return index_lib.ExactIndex(self.pool)
    return self._index_factory(self.pool)

  @classmethod
  def from_checkpoint(cls, directory, pool_vectors, pool_modality, index_factory=None):
    params, cfg = load(directory)
    return cls(params, cfg, pool_vectors, pool_modality, index_factory)

  def encode_queries(self, question_vectors: np.ndarray) -> jax.Array:
    q = jnp.asarray(question_vectors, jnp.float32)
    return adapt(self.params["adapters"], q, jnp.full((q.shape[0],), self.cfg.query_modality))

  def context(self, context_ids: np.ndarray):
    """Adapted evidence [B,E,D], mask [B,E] and modality [B,E] for pool ids [B,E] (-1 = none)."""
    ids = np.asarray(context_ids)
    if ids.ndim != 2:
      raise ValueError(f"context_ids must be [B, E], got shape {ids.shape}")
    if (ids >= len(self.pool)).any():
      raise ValueError(f"context id {int(ids.max())} is outside the pool of {len(self.pool)} items")
    mask = ids >= 0
    safe = np.where(mask, ids, 0)
    return self.pool[safe] * mask[..., None], mask, self.pool_modality[safe]

  def steer(self, q, context_ids, method: str) -> jax.Array:
    """Search vectors [B,D] for adapted questions q [B,D] and context pool ids [B,E]."""
    if method not in METHODS:
      raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if method == "hybrid" and "selector" not in self.params:
      raise ValueError("method 'hybrid' needs a trained selector (grail.fit_selector); this "
                       "retriever's parameters have none")
    ev, mask, mod = self.context(context_ids)
    return steer(self.params, q, ev, mask, mod, method=method, tau=self.cfg.tau,
                 num_modalities=len(self.cfg.modalities))

  def search(self, q, context_ids, method: str, k: int, exclude_context: bool = True):
    """Top-k pool ids and cosine scores [B,k]; the context items themselves are skipped when
    exclude_context (the caller already holds them)."""
    v = np.asarray(steering.l2_normalize(self.steer(q, context_ids, method)))
    ctx = np.asarray(context_ids)
    extra = ctx.shape[1] if exclude_context else 0
    ids, scores = self.index.search(v, k + extra)
    ids, scores = np.asarray(ids), np.asarray(scores)
    if not extra:
      return ids[:, :k], scores[:, :k]
    keep = ~(ids[:, :, None] == np.where(ctx >= 0, ctx, -2)[:, None, :]).any(-1)
    # Stable argsort of ~keep moves kept entries to the front, in score order.
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(ids, order, 1), np.take_along_axis(scores, order, 1)

  def ranks(self, q, context_ids, targets, method: str, exclude_context: bool = True,
            chunk: int = 256) -> np.ndarray:
    """1-based rank [B] of pool item targets[b] under `method` among all P items (context
    items skipped when exclude_context; ties rank optimistically). Exact over the full pool,
    whatever the index, because recall at any depth needs it."""
    v = steering.l2_normalize(self.steer(q, context_ids, method))
    ctx = np.asarray(context_ids) if exclude_context else np.full((len(targets), 1), -1)
    targets = np.asarray(targets, np.int32)
    out = []
    for s in range(0, len(targets), chunk):
      out.append(np.asarray(_ranks(v[s:s + chunk], self._device_pool, ctx[s:s + chunk],
                                   targets[s:s + chunk])))
    return np.concatenate(out) if out else np.zeros((0,), np.int32)

  @functools.cached_property
  def _device_pool(self):
    return jnp.asarray(self.pool)


@jax.jit
def _ranks(v, pool, context, targets):
  """v [B,D], pool [P,D], context [B,E] (-1 pad), targets [B] -> 1-based ranks [B]."""
  s = v @ pool.T  # [B,P]
  rows = jnp.arange(s.shape[0])
  t = s[rows, targets]
  excluded = jnp.zeros(s.shape, bool).at[rows[:, None], jnp.where(context >= 0, context, s.shape[1])
                                         ].set(True, mode="drop")
  s = jnp.where(excluded, -jnp.inf, s)
  return 1 + jnp.sum(s > t[:, None], axis=-1)


class GrailQueryWriter:
  """GRAIL as the second-round strategy of bounded retrieval (`subgraph.BoundedRetriever`,
  passed as `query_writer=`): it turns the question and the round-1 bridge evidence into a
  steered query vector [D] instead of a written query.

  The triple pool is indexed in the raw embedder space, so the returned vector lives there:
  the attention weights a and the gate g are computed in the adapted space the gate was trained
  in, and the subtraction is applied to the raw question with the raw context
  h_raw = sum_i a_i e_i, i.e. q - g (q . h_raw / ||h_raw||^2) h_raw. With identity adapters
  (a checkpoint trained with align_steps = 0) this is exactly `steer`. method: 'grail',
  'additive' or 'hybrid' (the selector picks per question)."""

  def __init__(self, params: dict, cfg: GrailConfig, method: str = "grail"):
    if method not in ("grail", "additive", "hybrid"):
      raise ValueError(f"GrailQueryWriter method must be 'grail', 'additive' or 'hybrid', got "
                       f"{method!r}")
    if method == "hybrid" and "selector" not in params:
      raise ValueError("GrailQueryWriter(method='hybrid') needs parameters with a trained "
                       "selector")
    self.params, self.cfg, self.method = params, cfg, method

  @classmethod
  def from_checkpoint(cls, directory, method: str = "grail") -> "GrailQueryWriter":
    params, cfg = load(directory)
    return cls(params, cfg, method)

  def __call__(self, ctx) -> np.ndarray:
    q_raw = np.asarray(ctx.question_embedding, np.float32)[None]  # [1,D]
    ev_raw = np.asarray(ctx.evidence_embeddings, np.float32).reshape(1, -1, self.cfg.dim)
    mod = np.asarray([[self.cfg.modalities.index(grail_data.triple_modality(t.source))
                       for t in ctx.evidence]], np.int32).reshape(1, -1)
    return np.asarray(_write_query(self.params, q_raw, ev_raw, mod, method=self.method,
                                   tau=self.cfg.tau, num_modalities=len(self.cfg.modalities),
                                   query_modality=self.cfg.query_modality))[0]


@functools.partial(jax.jit, static_argnames=("method", "tau", "num_modalities",
                                             "query_modality"))
def _write_query(params, q_raw, ev_raw, ev_modality, *, method, tau, num_modalities,
                 query_modality):
  b, e, d = ev_raw.shape
  q = adapt(params["adapters"], q_raw, jnp.full((b,), query_modality))
  ev = adapt(params["adapters"], ev_raw.reshape(b * e, d), ev_modality.reshape(-1)).reshape(b, e, d)
  mask = jnp.ones((b, e), bool)
  a = steering.context_weights(q, ev, mask, tau)
  h = jnp.einsum("BE,BED->BD", a, ev)
  h_raw = jnp.einsum("BE,BED->BD", a, ev_raw)
  g = steering.gap_gate(params["gate"], q, h)
  sub = steering.subtractive_steer(q_raw, h_raw, g)
  add = steering.additive_steer(q_raw, h_raw)
  if method == "grail":
    return sub
  if method == "additive":
    return add
  feats = selector_features(params["gate"], q, ev, mask, ev_modality, tau=tau,
                            num_modalities=num_modalities)
  use_sub = selector_logit(params["selector"], feats) >= 0.0
  return jnp.where(use_sub[:, None], steering.l2_normalize(sub), steering.l2_normalize(add))


def second_round_writer(config):
  """The GRAIL query writer a GraphLoom config asks for: config.retrieval.second_round ==
  'grail' with the checkpoint in config.grail.checkpoint (method config.grail.second_round_method,
  default 'hybrid' when the checkpoint has a selector, else 'grail'); None for any other
  second-round setting (the decoder / template writers of subgraph.py apply)."""
  if config.retrieval.second_round != "grail":
    return None
  directory = config.grail.checkpoint
  if not directory:
    raise ValueError("config.retrieval.second_round = 'grail' needs config.grail.checkpoint (a "
                     "directory written by launch.train_grail: <output_dir>/grail)")
  params, cfg = load(directory)
  method = config.grail.second_round_method or (
      "hybrid" if "selector" in params else "grail")
  return GrailQueryWriter(params, cfg, method)
