"""HieraSlot memories: entity and relation slots from a retrieved subgraph (docs/method.md §3).

Shapes: B batch, M slot-bank size (2 x triples), E text-embedding width, D model width,
F slot features.

Every retrieved triple t = (s, r, o) yields two slots:
  entity slot   key Emb(s), value Emb(r (+) o)
  relation slot key Emb(r), value Emb(s (+) o)
where (+) is text concatenation with one space, embedded as one phrase ("located in" (+)
"kitchen" -> Emb("located in kitchen")). We chose this over a sum of embeddings because the
sentence embedder then sees the words together (a sum of two unit vectors loses word order and
which word modifies which, and its norm depends on how similar the two parts are).

Bank layout (fixed so that slot types are static under jit): with n = bank_size // 2 triple
places, entity slot i sits at index i and relation slot i at index n + i; places beyond the
retrieved triples are padding (valid = False). When more than n triples are given the n with the
highest retrieval score are kept (stable order among equal scores).

Features f_p (`FEATURES`, the one table of names and columns; F = 5, all in [0, 1] for
in-range inputs):
  0 retrieval_score of the triple, 1 conf_ext, 2 centrality,
  3 context: the slot's key text occurs in the question (word-boundary match after lowercasing),
  4 is_entity: 1 for entity slots, 0 for relation slots.
Adding a feature is one name in `FEATURES` and its value in `build_bank`'s `computed`; the
router's input width (`NUM_FEATURES`) and the ablation switches (`pipeline.ablation`, by name)
follow from the table. The router adds one context feature per decoding position: whether the slot's key text already
appeared in the generated output. For it the bank keeps `key_tokens` [M, W]: the key text as
decoder tokens, as it would appear inside generated text (after a space), right-aligned in
W = MENTION_TOKENS places with -1 padding (see `ops.routing.output_mentions`). It keeps the value
text the same way in `value_tokens` [M, V] (V = VALUE_TOKENS, the last V tokens when longer, so
the object stays): with `fusion.token_values` the decoder adds the mean of its own input
embeddings of these tokens to the projected value (`models.llama.Llama.project_memory`).

Slot utility (the label of the calibration and contrastive losses) is gold-support membership:
1 when the slot's triple equals one of the example's gold supporting triples (compared after
lowercasing and folding whitespace), else 0; both slots of a triple share it.

Host side: `build_bank` (numpy, calls the embedder once per unique text) and `stack_banks`.
Device side: `SlotProjection`, the learned P(x) = W_p x + b_p into model width.
"""

import dataclasses
import re
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from flax import nnx

# The static slot features, in their column order of `SlotBank.features`.
FEATURES = ("retrieval_score", "conf_ext", "centrality", "context", "is_entity")
NUM_FEATURES = len(FEATURES)
COLUMN = {name: i for i, name in enumerate(FEATURES)}
MENTION_TOKENS = 8  # W: tokens of a slot name tracked by the output-mention feature
VALUE_TOKENS = 8  # V: tokens of a slot's value text kept for fusion.token_values
_FIELDS = ("subject", "relation", "object", "score", "conf_ext", "centrality")


def _norm(text: str) -> str:
  return " ".join(str(text).lower().split())


def _field(triple: Any, name: str, index: int) -> Any:
  if isinstance(triple, Mapping):
    if name in triple:
      return triple[name]
  elif hasattr(triple, name):
    return getattr(triple, name)
  raise KeyError(f"triple {index} ({triple!r}) has no field {name!r}; "
                 f"expected the fields {_FIELDS}")


def _unit_interval(value: Any, name: str, index: int) -> float:
  v = float(value)
  if not 0.0 <= v <= 1.0 or not np.isfinite(v):
    raise ValueError(f"triple {index}: {name}={value!r} must lie in [0, 1]")
  return v


@dataclasses.dataclass
class SlotBank:
  """One example's slot bank (numpy, host side); shapes without the batch axis."""
  keys: np.ndarray  # [M, E] key text embeddings
  values: np.ndarray  # [M, E] value text embeddings
  valid: np.ndarray  # [M] bool
  is_entity: np.ndarray  # [M] bool
  features: np.ndarray  # [M, F]
  reliability: np.ndarray  # [M] raw reliability conf_ext (calibrated later by the router)
  utility: np.ndarray  # [M] float 0/1 gold-support membership
  triple_index: np.ndarray  # [M] int index into the triples given, -1 for padding
  key_tokens: np.ndarray  # [M, W] int32 key text as decoder tokens, right-aligned, -1 padded
  value_tokens: np.ndarray  # [M, V] int32 value text as decoder tokens, the same layout


def mentioned(text: str, question: str) -> float:
  """1.0 when `text` occurs in `question` as whole words (case and spacing ignored), else 0.0:
  the context feature of a slot whose key is `text`."""
  text, question = _norm(text), _norm(question)
  if not text:
    return 0.0
  return float(re.search(r"(?<!\w)" + re.escape(text) + r"(?!\w)", question) is not None)


def key_token_row(text: str, tokenize: Callable[[str], Sequence[int]] | None,
                  width: int = MENTION_TOKENS) -> np.ndarray:
  """[W] int32: the tokens of " " + text, right-aligned (its last W when longer), -1 padded."""
  row = np.full((width,), -1, np.int32)
  if tokenize is not None and text.strip():
    ids = list(tokenize(" " + text.strip()))[-width:]
    if ids:
      row[width - len(ids):] = ids
  return row


def _embed_slots(rows, embed) -> tuple[dict, int]:
  """Text -> embedding of every slot key and value of `rows` (each text embedded once) and the
  embedding width; a non-finite embedding is an error naming its triple."""
  texts = []
  for _, s, r, o, *_ in rows:
    texts += [s, f"{r} {o}", r, f"{s} {o}"]
  unique = sorted(set(texts))
  if unique:
    table = np.asarray(embed(unique), np.float32)
    if table.ndim != 2 or table.shape[0] != len(unique):
      raise ValueError(f"embed returned shape {table.shape} for {len(unique)} texts; "
                       f"expected [{len(unique)}, E]")
    finite = np.isfinite(table).all(axis=1)
    if not finite.all():  # a NaN key or value would reach every routed attention row
      text = unique[int(np.argmin(finite))]
      i, ts, tr, to = next((i, s, r, o) for i, s, r, o, *_ in rows
                           if text in (s, f"{r} {o}", r, f"{s} {o}"))
      raise ValueError(f"slot bank: the embedding of {text!r} (a slot of triple {i}: ({ts}, "
                       f"{tr}, {to})) contains NaN or inf; refusing to build the bank")
    width = table.shape[1]
  else:
    table = np.zeros((0, 0), np.float32)
    width = int(np.asarray(embed(["."])).shape[1])
  return {t: table[j] for j, t in enumerate(unique)}, width


def build_bank(triples: Sequence[Any], embed: Callable[[list[str]], np.ndarray], bank_size: int,
               question: str = "", gold: Sequence[Any] = (),
               tokenize: Callable[[str], Sequence[int]] | None = None) -> SlotBank:
  """Slot bank of one example.

  Args:
    triples: retrieved triples, mappings or objects with subject, relation, object, score,
      conf_ext, centrality (the last three in [0, 1]).
    embed: texts -> [N, E] embeddings (for example `load_embedder().embed`).
    bank_size: M, even; holds bank_size // 2 triples.
    question: the question, for the context feature.
    gold: gold supporting triples (mappings/objects with subject, relation, object), for utility.
    tokenize: the decoder tokenizer's text -> ids, for `key_tokens` and `value_tokens` (None:
      all -1, the mention feature never fires and token values add nothing).
  """
  if bank_size <= 0 or bank_size % 2:
    raise ValueError(f"bank_size={bank_size} must be a positive even number (2 slots a triple)")
  n = bank_size // 2
  rows = []
  for i, t in enumerate(triples):
    s, r, o = (str(_field(t, f, i)) for f in ("subject", "relation", "object"))
    rows.append((i, s, r, o, _unit_interval(_field(t, "score", i), "score", i),
                 _unit_interval(_field(t, "conf_ext", i), "conf_ext", i),
                 _unit_interval(_field(t, "centrality", i), "centrality", i)))
  if len(rows) > n:
    rows = sorted(rows, key=lambda row: -row[4])[:n]
  gold_set = {tuple(_norm(_field(g, f, j)) for f in ("subject", "relation", "object"))
              for j, g in enumerate(gold)}
  q = _norm(question)

  lookup, width = _embed_slots(rows, embed)

  keys = np.zeros((bank_size, width), np.float32)
  values = np.zeros((bank_size, width), np.float32)
  valid = np.zeros((bank_size,), bool)
  is_entity = np.arange(bank_size) < n
  features = np.zeros((bank_size, NUM_FEATURES), np.float32)
  reliability = np.zeros((bank_size,), np.float32)
  utility = np.zeros((bank_size,), np.float32)
  triple_index = np.full((bank_size,), -1, np.int32)
  key_tokens = np.full((bank_size, MENTION_TOKENS), -1, np.int32)
  value_tokens = np.full((bank_size, VALUE_TOKENS), -1, np.int32)
  for j, (i, s, r, o, score, conf, cent) in enumerate(rows):
    useful = float((_norm(s), _norm(r), _norm(o)) in gold_set)
    for p, key, value, is_ent in ((j, s, f"{r} {o}", 1.0), (n + j, r, f"{s} {o}", 0.0)):
      keys[p] = lookup[key]
      values[p] = lookup[value]
      valid[p] = True
      computed = {"retrieval_score": score, "conf_ext": conf, "centrality": cent,
                  "context": mentioned(key, q), "is_entity": is_ent}
      features[p] = [computed[name] for name in FEATURES]
      reliability[p] = conf
      utility[p] = useful
      triple_index[p] = i
      key_tokens[p] = key_token_row(key, tokenize)
      value_tokens[p] = key_token_row(value, tokenize, VALUE_TOKENS)
  return SlotBank(keys, values, valid, is_entity, features, reliability, utility, triple_index,
                  key_tokens, value_tokens)


def stack_banks(banks: Sequence[SlotBank]) -> dict[str, np.ndarray]:
  """Batch of banks as a dict of [B, ...] arrays (field names of SlotBank)."""
  if not banks:
    raise ValueError("stack_banks needs at least one bank")
  shapes = {b.keys.shape for b in banks}
  if len(shapes) != 1:
    raise ValueError(f"banks differ in shape {sorted(shapes)}; build them with one bank_size "
                     "and one embedder")
  return {f.name: np.stack([getattr(b, f.name) for b in banks])
          for f in dataclasses.fields(SlotBank)}


class SlotProjection(nnx.Module):
  """P(x) = W_p x + b_p from text-embedding width E into model width D, shared by keys/values.

  rank > 0 factors W_p = W_up W_down through `rank` dimensions (E r + r D parameters instead of
  E D: at Llama-3-8B width, rank 64 costs 0.29M parameters instead of 1.57M).
  """

  def __init__(self, embed_dim: int, model_dim: int, *, rank: int = 0, rngs: nnx.Rngs):
    if rank < 0:
      raise ValueError(f"slot projection rank={rank} must be >= 0 (0 = full rank)")
    self.down = nnx.Linear(embed_dim, rank, use_bias=False, rngs=rngs) if rank else None
    self.proj = nnx.Linear(rank or embed_dim, model_dim, rngs=rngs)

  def _p(self, x):
    return self.proj(self.down(x) if self.down is not None else x)

  def __call__(self, keys: jax.Array, values: jax.Array, valid: jax.Array):
    """keys, values [B, M, E], valid [B, M] -> ([B, M, D], [B, M, D]), zero on padding."""
    m = valid[..., None].astype(keys.dtype)
    return self._p(keys) * m, self._p(values) * m
