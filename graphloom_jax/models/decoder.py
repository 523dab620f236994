"""`Decoder`: a loaded Llama plus its tokenizer, with jitted full-sequence scoring and a jitted
generation loop (greedy or seeded temperature / top-p sampling).

Compilation: prompt lengths are padded (on the left) to multiples of `PROMPT_BUCKET` and the
number of new tokens to a power of two, so a serving process compiles once per shape bucket.
Model weights are passed to the jitted functions as arguments (never baked in as constants).
"""

import functools
import math
import os
import pathlib
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphloom_jax import assets, atomic
from graphloom_jax import sharding as sharding_lib
from graphloom_jax.models import llama, weights
from graphloom_jax.models.tokenizer import Tokenizer
from graphloom_jax.ops import routing

PROMPT_BUCKET = 64
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


SEED_RANGE = (0, 2**32 - 1)  # what jax.random.key and numpy both take without wrapping


def _is_int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
      x, (bool, np.bool_))


def _finite(x) -> bool:
  try:
    return math.isfinite(float(x))
  except OverflowError:  # an int beyond float range
    return False


def check_positive_int(value, name: str) -> int:
  """`value` as an int when it is an integer >= 1 (bools and floats refused), else an error
  naming `name`."""
  if not _is_int(value):
    raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
  if value < 1:
    raise ValueError(f"{name} must be >= 1, got {value}")
  return int(value)


def check_sampling(temperature, top_p, seed) -> tuple[float, float, int]:
  """Validated (temperature, top_p, seed): temperature a finite number >= 0 (0 = greedy),
  top_p in (0, 1], seed an integer in SEED_RANGE. Anything else is an error naming the
  argument, never a silent fallback to greedy decoding."""
  if not _is_real(temperature):
    raise TypeError(f"temperature must be a number, got {type(temperature).__name__} "
                    f"{temperature!r}")
  if not _finite(temperature) or temperature < 0:
    raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}")
  if not _is_real(top_p):
    raise TypeError(f"top_p must be a number, got {type(top_p).__name__} {top_p!r}")
  if not _finite(top_p) or not 0 < top_p <= 1:
    raise ValueError(f"top_p must be in (0, 1], got {top_p}")
  if not _is_int(seed):
    raise TypeError(f"seed must be an integer, got {type(seed).__name__} {seed!r}")
  if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
    raise ValueError(f"seed must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], got {seed}")
  return float(temperature), float(top_p), int(seed)


def check_token_rows(rows, vocab_size: int, name: str = "prompt_ids") -> list[np.ndarray]:
  """Each row of `rows` as an int32 array: a non-empty 1-D sequence of integer token ids in
  [0, vocab_size). Floats (3.7 would silently become 3), bools and strings are refused."""
  if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
    raise TypeError(f"{name} must be a list of token id lists, got {type(rows).__name__}")
  if len(rows) == 0:
    raise ValueError(f"{name}: no prompts given")
  out = []
  for i, row in enumerate(rows):
    if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
      raise TypeError(f"{name}[{i}] must be a list of token ids, got {type(row).__name__}")
    if len(row) == 0:
      raise ValueError(f"{name}[{i}]: prompt {i} is empty")
    if hasattr(row, "__array__"):  # numpy / jax arrays: their dtype decides
      arr = np.asarray(row)
      integral = np.issubdtype(arr.dtype, np.integer)
    else:  # lists: every element (numpy would turn [True, 2] or [1.0, 2] into integers)
      integral = all(_is_int(t) for t in row)
      arr = np.asarray(row) if integral else None
    if not integral:
      bad = next((t for t in (row.tolist() if hasattr(row, "tolist") else row)
                  if not _is_int(t)), None)
      raise TypeError(f"{name}[{i}] holds a non-integer token id {bad!r}; token ids must be "
                      "integers")
    if arr.ndim != 1:
      raise ValueError(f"{name}[{i}] must be a flat list of token ids, got shape {arr.shape}")
    arr = arr.astype(np.int64)
    if arr.min() < 0 or arr.max() >= vocab_size:
      raise ValueError(f"{name}[{i}] has token ids out of range [0, {vocab_size}): min "
                       f"{arr.min()}, max {arr.max()}")
    out.append(arr.astype(np.int32))
  return out


def _bucket(n: int, multiple: int) -> int:
  return max(multiple, -(-n // multiple) * multiple)


def _pow2(n: int, minimum: int = 8) -> int:
  return max(minimum, 1 << max(0, (n - 1).bit_length()))


@functools.partial(jax.jit, static_argnames=("graphdef", "return_hidden", "router_def",
                                             "first_layer"))
def _forward(graphdef, state, tokens, valid, memory=None, router_def=None, router_state=None,
             return_hidden=False, first_layer=-1):
  model = nnx.merge(graphdef, state)
  route = nnx.merge(router_def, router_state) if router_def is not None else None
  cache = llama.KVCache.init(model.config, tokens.shape[0], tokens.shape[1], model.dtype)
  logits, _, aux = model(tokens, cache, valid, memory=memory, route=route,
                         first_layer=first_layer, return_hidden=return_hidden)
  return logits, aux


def _sample(logits, key, temperature, top_p, sample: bool):
  """logits [B,V] float32 -> token ids [B]. Greedy unless `sample`."""
  if not sample:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  logits = logits / jnp.maximum(temperature, 1e-6)
  order = jnp.argsort(-logits, axis=-1)
  sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
  probs = jax.nn.softmax(sorted_logits, axis=-1)
  # keep the smallest prefix whose mass reaches top_p (always at least the best token)
  keep = (jnp.cumsum(probs, axis=-1) - probs) < top_p
  sorted_logits = jnp.where(keep, sorted_logits, -jnp.inf)
  choice = jax.random.categorical(key, sorted_logits, axis=-1)
  return jnp.take_along_axis(order, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)


class _Sampling(NamedTuple):
  """The generation loop's traced inputs besides the prompts (replicated on a mesh)."""
  eos_ids: jax.Array  # [E] int32 (-1 when none)
  key: jax.Array
  temperature: jax.Array  # float32 scalar
  top_p: jax.Array  # float32 scalar
  pad_id: jax.Array  # int32 scalar


class _Loop(NamedTuple):
  """The generation loop's static settings (one compiled loop per distinct value).

  unstack_layers: run the layers as an unrolled loop over per-layer weights (`layer_weights`,
  which the Decoder slices from the stack once and keeps): slicing the stack inside the loop
  would copy the weights at every step, and slicing it inside the call once per call (about
  0.3 s for SmolLM2 float32 on the development CPU, mostly first-touch page faults of the
  copy, against 0.36 s for a whole 16-token answer).
  routing: record the active slots and log-gates [B, max_new + 1, M] that predicted each new
  token (row j predicts token j; the last predicts the token after max_new)."""
  max_new: int
  sample: bool
  first_layer: int = -1
  sparse: llama.SparseSpec | None = None
  unstack_layers: bool = False
  routing: bool = False  # also return each step's routing (memory generation only)


@functools.partial(jax.jit, static_argnames=("graphdef", "router_def", "loop"))
def _generate(graphdef, state, tokens, valid, sampling: _Sampling, memory=None, router_def=None,
              router_state=None, layer_weights=None, *, loop: _Loop):
  """tokens/valid [B, Tp] left-padded prompts -> new tokens [B, loop.max_new] (pad after EOS),
  and with loop.routing the routing (active [B, max_new + 1, M] bool, log-gates float32) that
  predicted each of them."""
  eos_ids, key, temperature, top_p, pad_id = sampling
  max_new, sample, first_layer, sparse, unstack_layers, keep_routing = loop
  keep_routing = keep_routing and memory is not None
  model = nnx.merge(graphdef, state)
  route = nnx.merge(router_def, router_state) if router_def is not None else None
  b, tp = tokens.shape
  cache = llama.KVCache.init(model.config, b, tp + max_new, model.dtype,
                             block_size=sparse.block_size if sparse else 0)
  memory_kv = model.project_memory(memory, first_layer) if memory is not None else None
  step = functools.partial(model, route=route, memory_kv=memory_kv, first_layer=first_layer,
                           sparse=sparse,
                           layer_weights=layer_weights if unstack_layers else None)
  # Mention tracking (a router context feature): nothing is generated during the prompt; each
  # step first adds the token it is fed (the last one generated) to the output window.
  track = memory is not None and memory.slot_key_tokens is not None
  if memory is not None:
    memory = memory.replace(slot_mentioned=None)
  logits, cache, aux = step(tokens, cache, valid, memory=memory)
  key, sub = jax.random.split(key)
  first = _sample(logits[:, -1], sub, temperature, top_p, sample)
  if track:
    mentions = (jnp.full((b, memory.slot_key_tokens.shape[-1]), -1, jnp.int32),
                jnp.zeros((b, memory.num_slots), bool))
  else:
    mentions = None
  routes = None
  if keep_routing:  # row 0: the prompt's last position, which predicts the first token
    routes = (jnp.zeros((b, max_new + 1, memory.num_slots), bool).at[:, 0].set(
                  aux["slot_active"][:, -1]),
              jnp.zeros((b, max_new + 1, memory.num_slots), jnp.float32).at[:, 0].set(
                  aux["slot_bias"][:, -1].astype(jnp.float32)))

  def cond(carry):
    i, _, _, _, done, _, _, _ = carry
    return (i < max_new) & ~jnp.all(done)

  def body(carry):
    i, tok, cache, out, done, key, mentions, routes = carry
    out = out.at[:, i].set(jnp.where(done, pad_id, tok))
    done = done | jnp.isin(tok, eos_ids)
    mem = memory
    if track:
      mentions = routing.mention_step(*mentions, tok, memory.slot_key_tokens)
      mem = memory.replace(slot_mentioned=mentions[1][:, None, :])
    logits, cache, aux = step(tok[:, None], cache, jnp.ones((b, 1), bool), memory=mem)
    if keep_routing:  # fed token i, this step predicts token i + 1
      routes = (routes[0].at[:, i + 1].set(aux["slot_active"][:, 0]),
                routes[1].at[:, i + 1].set(aux["slot_bias"][:, 0].astype(jnp.float32)))
    key, sub = jax.random.split(key)
    return (i + 1, _sample(logits[:, 0], sub, temperature, top_p, sample), cache, out, done, key,
            mentions, routes)

  init = (jnp.zeros((), jnp.int32), first, cache, jnp.full((b, max_new), pad_id, jnp.int32),
          jnp.zeros((b,), bool), key, mentions, routes)
  final = jax.lax.while_loop(cond, body, init)
  return (final[3], final[7]) if keep_routing else final[3]


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _unstack(graphdef, state):
  return nnx.merge(graphdef, state).unstacked_layer_params()


def _split_router(router):
  if router is None:
    return None, None
  return nnx.split(router)


def _check_memory(memory, batch: int):
  if memory is None:
    return
  if memory.batch_size != batch:
    raise ValueError(f"memory holds {memory.batch_size} rows for {batch} prompts")
  names = memory.slot_key_tokens
  if names is not None and (names.ndim != 3 or names.shape[:2] != (batch, memory.num_slots)):
    raise ValueError(f"memory.slot_key_tokens has shape {tuple(names.shape)}; expected "
                     f"[{batch}, {memory.num_slots}, W] (one token row per slot)")


def cut_at_eos(out: np.ndarray, eos_ids: Sequence[int]) -> list[list[int]]:
  """Generated rows [B, N] as lists, each cut before its first EOS."""
  stop = set(eos_ids)
  results = []
  for row in out.tolist():
    cut = next((j for j, t in enumerate(row) if t in stop), len(row))
    results.append(row[:cut])
  return results


class Decoder:
  """A frozen Llama decoder with its tokenizer.

  Attributes: `model` (the `llama.Llama` NNX module), `config` (`llama.LlamaConfig`),
  `tokenizer` (`Tokenizer` or None when the checkpoint carries none), `source` (where it came
  from), `max_seq_len` (prompt + new tokens limit), `unstack_layers` (generation runs the
  layers over per-layer copies of the stacked weights, sliced once on first use and kept:
  default on CPU, where it is ~1.5x faster per token than scanning the stack, at the cost of a
  second copy of the layer weights in memory; off on accelerators, where HBM is scarcer;
  benchmarks/device_check.sh measures both forms there).
  """

  def __init__(self, model: llama.Llama, tokenizer: Tokenizer | None = None, source: str = "",
               max_seq_len: int | None = None, unstack_layers: bool | None = None):
    self.model = model
    self.unstack_layers = (jax.default_backend() == "cpu" if unstack_layers is None
                           else bool(unstack_layers))
    self.config = model.config
    self.tokenizer = tokenizer
    self.source = source
    self.max_seq_len = (int(model.config.max_position_embeddings) if max_seq_len is None
                        else check_positive_int(max_seq_len, "max_seq_len"))
    self._graphdef, self._state = nnx.split(model)
    self._layers = None  # (the state they were sliced from, per-layer weights)

  def layer_weights(self) -> list[dict[str, jax.Array]]:
    """The per-layer weights the unstacked generation loop reads, sliced from the stack once
    (again only if the decoder's state is replaced)."""
    if self._layers is None or self._layers[0] is not self._state:
      self._layers = (self._state, _unstack(self._graphdef, self._state))
    return self._layers[1]

  @property
  def dtype(self):
    return self.model.dtype

  def _check_ids(self, input_ids) -> np.ndarray:
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or ids.shape[1] == 0:
      raise ValueError(f"input_ids must be a non-empty [B, T] integer array, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
      raise ValueError(f"input_ids must be integers, got {ids.dtype}")
    if ids.min() < 0 or ids.max() >= self.config.vocab_size:
      raise ValueError(f"input_ids out of range [0, {self.config.vocab_size}): "
                       f"min {ids.min()}, max {ids.max()}")
    if ids.shape[1] > self.max_seq_len:
      raise ValueError(f"input of {ids.shape[1]} tokens exceeds the context of "
                       f"{self.max_seq_len} tokens")
    return ids.astype(np.int32)

  def logits(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None, *,
             memory=None, router=None, first_layer: int = -1) -> np.ndarray:
    """input_ids int32 [B, T] -> float32 logits [B, T, V]. `attention_mask` [B, T] marks real
    tokens of left-padded rows; `memory` (models.memory.Memory) and `router` (an nnx module
    called as router(h, memory) -> (active, bias)) enable KG-JSA++ in layers >= first_layer."""
    ids = self._check_ids(input_ids)
    _check_memory(memory, ids.shape[0])
    valid = np.ones(ids.shape, bool) if attention_mask is None else np.asarray(attention_mask, bool)
    router_def, router_state = _split_router(router)
    logits, _ = _forward(self._graphdef, self._state, ids, valid, memory, router_def,
                         router_state, first_layer=first_layer)
    return np.asarray(logits, dtype=np.float32)

  def hidden_states(self, input_ids: np.ndarray) -> np.ndarray:
    """[L + 1, B, T, D] float32: the embedding output and the residual stream after each layer
    (the last before the final norm), like transformers' `output_hidden_states` minus its
    final-norm substitution."""
    ids = self._check_ids(input_ids)
    _, aux = _forward(self._graphdef, self._state, ids, np.ones(ids.shape, bool),
                      return_hidden=True)
    return np.asarray(aux["hidden"], dtype=np.float32)

  def encode_prompts(self, prompts: Sequence[str], chat: bool = True) -> list[list[int]]:
    if self.tokenizer is None:
      raise ValueError(f"{self.source}: this checkpoint has no tokenizer; pass token ids "
                       "to generate_ids() instead")
    if isinstance(prompts, str):
      raise TypeError("prompts must be a list of strings, not a single string")
    if not isinstance(chat, (bool, np.bool_)):
      raise TypeError(f"chat must be True or False, got {type(chat).__name__} {chat!r}")
    if not hasattr(prompts, "__len__") or len(prompts) == 0:
      raise ValueError("prompts must be a non-empty list of strings")
    for i, prompt in enumerate(prompts):
      if not isinstance(prompt, str):
        raise TypeError(f"prompt {i} must be a string, got {type(prompt).__name__}")
      if not prompt.strip():
        raise ValueError(f"prompt {i} is empty")
    return [self.tokenizer.chat_ids(p) if chat else self.tokenizer.encode(p) for p in prompts]

  def generate_ids(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int = 64, *,
                   temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                   eos_ids: Sequence[int] | None = None, memory=None, router=None,
                   first_layer: int = -1, sparse: llama.SparseSpec | None = None,
                   mesh: jax.sharding.Mesh | None = None, return_routing: bool = False):
    """Token-level generation, the one generation loop. Greedy when temperature == 0; stops a
    row at its first EOS (the EOS is not returned). With `memory` (and optionally a `router`
    recomputing the active slots at every step) layers >= first_layer attend jointly to prefix,
    slots and their own cache; with `sparse` each decoding step reads only the sparse set I_t
    of the cache. With `mesh` the prompt rows are padded to a multiple of its "data" axis
    (copies of the last, `sharding.pad_list`) and split over it, and `memory` must hold the
    padded rows (built from evidence placed by `sharding.place_rows`); the real rows' tokens
    are returned. With `return_routing` (and `memory`) it returns (tokens, routing): per row,
    the active slots [n + 1, M] bool and gates [n + 1, M] float32 that predicted each of its n
    tokens and then its EOS (n rows when it stopped at max_new_tokens without one), i.e. the
    routing a teacher-forced pass over [prompt ; tokens ; EOS] computes at those steps."""
    rows = check_token_rows(prompt_ids, self.config.vocab_size)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    temperature, top_p, seed = check_sampling(temperature, top_p, seed)
    if not _is_int(first_layer):
      raise TypeError(f"first_layer must be an integer, got {type(first_layer).__name__}")
    lengths = [len(p) for p in rows]
    for i, n in enumerate(lengths):
      if n + max_new_tokens > self.max_seq_len:
        raise ValueError(f"prompt {i} has {n} tokens; with max_new_tokens={max_new_tokens} it "
                         f"exceeds the context of {self.max_seq_len} tokens")
    if eos_ids is None:
      eos_ids = self.tokenizer.eos_ids if self.tokenizer else self.config.eos_token_ids
    elif isinstance(eos_ids, (str, bytes)) or not all(_is_int(t) for t in eos_ids):
      raise TypeError(f"eos_ids must be a list of integer token ids, got {eos_ids!r}")
    n = len(rows)
    mesh = sharding_lib.auto_axes(mesh)
    if mesh is not None:
      rows = sharding_lib.pad_list(rows, sharding_lib.data_size(mesh))
    tokens, valid, max_new, pad = self.left_padded(rows, max_new_tokens)
    _check_memory(memory, len(rows))
    router_def, router_state = _split_router(router)
    sampling = _Sampling(jnp.asarray(list(eos_ids) or [-1], jnp.int32), jax.random.key(seed),
                         jnp.float32(temperature), jnp.float32(top_p), jnp.int32(pad))
    if mesh is not None:
      placed, _ = sharding_lib.place_rows(dict(tokens=tokens, valid=valid), mesh)
      tokens, valid = placed["tokens"], placed["valid"]
      sampling = jax.device_put(sampling, sharding_lib.replicated(mesh))
    keep = bool(return_routing) and memory is not None
    if return_routing and memory is None:
      raise ValueError("return_routing needs memory: only memory generation routes slots")
    loop = _Loop(max_new, temperature > 0, first_layer, sparse, self.unstack_layers, keep)
    out = _generate(self._graphdef, self._state, tokens, valid, sampling, memory, router_def,
                    router_state, self.layer_weights() if self.unstack_layers else None,
                    loop=loop)
    if not keep:
      return cut_at_eos(np.asarray(out)[:n, :max_new_tokens], eos_ids)
    out, (active, bias) = out
    rows = cut_at_eos(np.asarray(out)[:n, :max_new_tokens], eos_ids)
    active, gates = np.asarray(active), np.exp(np.asarray(bias))
    steps = [min(len(r) + 1, max_new_tokens) for r in rows]
    return rows, [(active[i, :k], gates[i, :k]) for i, k in enumerate(steps)]

  def left_padded(self, rows: Sequence[Sequence[int]], max_new_tokens: int):
    """Prompt rows left-padded to one length bucket for the generation loop: tokens and valid
    [B, W], the loop's step count (a power of two >= max_new_tokens that fits the context) and
    the pad id."""
    pad = self.tokenizer.pad_id if self.tokenizer else 0
    width = min(_bucket(max(len(p) for p in rows), PROMPT_BUCKET),
                self.max_seq_len - max_new_tokens)
    max_new = min(_pow2(max_new_tokens), self.max_seq_len - width)
    tokens = np.full((len(rows), width), pad, np.int32)
    valid = np.zeros(tokens.shape, bool)
    for i, p in enumerate(rows):
      tokens[i, width - len(p):] = p
      valid[i, width - len(p):] = True
    self._check_ids(tokens)
    return tokens, valid, max_new, pad

  def generate(self, prompts: Sequence[str], max_new_tokens: int = 64, chat: bool = True, *,
               temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, memory=None,
               router=None, first_layer: int = -1,
               sparse: llama.SparseSpec | None = None) -> list[str]:
    """Answers each prompt (through the chat template unless chat=False); greedy by default.
    `memory`, `router`, `first_layer` and `sparse` as in `generate_ids`."""
    ids = self.encode_prompts(prompts, chat)
    outs = self.generate_ids(ids, max_new_tokens, temperature=temperature, top_p=top_p,
                             seed=seed, memory=memory, router=router, first_layer=first_layer,
                             sparse=sparse)
    return [self.tokenizer.decode(o).strip() for o in outs]


def load_tokenizer(fmt: str, path: pathlib.Path, config: llama.LlamaConfig) -> Tokenizer | None:
  if fmt == "gguf":
    return Tokenizer.from_gguf(path, config.eos_token_ids)
  folder = path / weights.ORBAX_TOKENIZER if fmt == "orbax" else path
  if (folder / "tokenizer.json").exists() or (folder / "tokenizer.model").exists():
    return Tokenizer.from_folder(folder, config.eos_token_ids)
  return None


def load_decoder(path: str | os.PathLike, dtype: str = "float32",
                 max_seq_len: int | None = None,
                 mesh: jax.sharding.Mesh | None = None) -> Decoder:
  """Loads a decoder from a safetensors folder, a Flax msgpack folder, a `.gguf` file, an orbax
  checkpoint written by `launch/convert.py`, or "embedded" (SmolLM2-135M-Instruct).

  Tensors stream from the file one at a time straight into `dtype` and onto the devices
  (`weights.load_params`); with `mesh` (a `jax.sharding.Mesh` with axes "data" and "model", of
  Auto or Explicit axis types: `jax.make_mesh`'s default works) each parameter is placed under
  its `llama.PARTITIONS` sharding."""
  if dtype not in DTYPES:
    raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
  if str(path) == "embedded":
    path = assets.smollm2_gguf()
  path = pathlib.Path(path)
  checkpoint = weights.open_checkpoint(path)
  model = weights.load_params(checkpoint.config, checkpoint.tensors(DTYPES[dtype]), DTYPES[dtype],
                            mesh, source=str(path))
  return Decoder(model, load_tokenizer(checkpoint.fmt, path, checkpoint.config),
                 source=str(path), max_seq_len=max_seq_len)


def convert_to_orbax(source: str | os.PathLike, output: str | os.PathLike) -> pathlib.Path:
  """Writes any loadable checkpoint ("embedded", safetensors, Flax msgpack, GGUF, orbax) as an
  orbax checkpoint in our layout, with its tokenizer beside it. Refuses a non-empty output.

  Atomic: checkpoint and tokenizer are written into a temporary sibling of `output` that is
  renamed into place only when both are complete, so a failed or killed conversion leaves no
  partial output folder; weights holding NaN or inf are refused before anything is written."""
  path = assets.smollm2_gguf() if str(source) == "embedded" else pathlib.Path(source)
  out = pathlib.Path(output)
  if out.exists() and not out.is_dir():
    raise FileExistsError(f"{out} is a file; choose a new output folder")
  if out.exists() and any(out.iterdir()):
    raise FileExistsError(f"{out} exists and is not empty; choose a new output folder")
  fmt, config, params = weights.load(path)
  bad = [k for k, v in sorted(params.items()) if not np.isfinite(np.asarray(v)).all()]
  if bad:
    raise weights.WeightsError(f"{path}: parameter(s) {bad[:5]} contain NaN or inf "
                               f"({len(bad)} in all); refusing to convert, nothing was written")
  tokenizer = load_tokenizer(fmt, path, config)
  with atomic.atomic_dir(out) as tmp:
    weights.save_orbax(tmp, config, params)
    if tokenizer is not None:
      tokenizer.save(tmp / weights.ORBAX_TOKENIZER)
  return out


def random_decoder(config: llama.LlamaConfig, seed: int = 0, dtype: str = "float32",
                   max_seq_len: int | None = None) -> Decoder:
  """A randomly initialised decoder without a tokenizer (tests, shape checks, benchmarks)."""
  return Decoder(llama.init_random(config, seed, DTYPES[dtype]), None, source="random",
                 max_seq_len=max_seq_len)


def from_config(model_cfg, mesh: jax.sharding.Mesh | None = None) -> Decoder:
  """Builds the decoder an ml_collections `model` section describes, its parameters on `mesh`
  when one is given (checkpoints stream each tensor into its shards; the random decoder is
  built, then placed, `llama.shard_model`)."""
  if model_cfg.weights == "random":
    dec = random_decoder(llama.config_from_arch(model_cfg.arch), dtype=model_cfg.dtype,
                         max_seq_len=model_cfg.max_seq_len)
    if mesh is None:
      return dec
    llama.shard_model(dec.model, mesh)  # in place; a new Decoder splits the placed state
    return Decoder(dec.model, dec.tokenizer, source=dec.source, max_seq_len=dec.max_seq_len)
  if not model_cfg.weights:
    raise ValueError("config.model.weights is empty: give a weights path, 'embedded' or 'random'")
  return load_decoder(model_cfg.weights, model_cfg.dtype, max_seq_len=model_cfg.max_seq_len,
                      mesh=mesh)
