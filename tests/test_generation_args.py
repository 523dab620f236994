"""Generation arguments: every bad value is a clear error naming the argument, never a silent
fallback to greedy decoding or a silent cast (3.7 read as token 3)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphloom_jax.configs import tiny
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.models import llama
from graphloom_jax.pipeline.prompts import ByteTokenizer

PROMPT = [[3, 5, 7, 9]]


@pytest.fixture(scope="module")
def dec():
  cfg = tiny.get_config().model
  return decoder_lib.random_decoder(llama.config_from_arch(cfg.arch), max_seq_len=128)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(temperature=-0.5), ValueError, "temperature"),
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(temperature=float("inf")), ValueError, "temperature"),
    (dict(temperature="0.7"), TypeError, "temperature"),
    (dict(temperature=True), TypeError, "temperature"),
    (dict(temperature=1.0, top_p=0.0), ValueError, "top_p"),
    (dict(temperature=1.0, top_p=1.5), ValueError, "top_p"),
    (dict(temperature=1.0, top_p=-0.1), ValueError, "top_p"),
    (dict(temperature=1.0, top_p=float("nan")), ValueError, "top_p"),
    (dict(temperature=1.0, top_p=None), TypeError, "top_p"),
    (dict(temperature=1.0, seed=-1), ValueError, "seed"),
    (dict(temperature=1.0, seed=2**64), ValueError, "seed"),
    (dict(temperature=1.0, seed=1.5), TypeError, "seed"),
    (dict(temperature=1.0, seed=False), TypeError, "seed"),
    (dict(first_layer=1.0), TypeError, "first_layer"),
    (dict(eos_ids=[1.5]), TypeError, "eos_ids"),
    (dict(eos_ids="2"), TypeError, "eos_ids"),
])
def test_bad_sampling_arguments_name_the_argument(dec, kwargs, error, name):
  with pytest.raises(error, match=name):
    dec.generate_ids(PROMPT, 4, **kwargs)


@pytest.mark.parametrize("max_new", [0, -3, 2.0, 2.5, True, "4", None])
def test_bad_max_new_tokens(dec, max_new):
  with pytest.raises((TypeError, ValueError), match="max_new_tokens"):
    dec.generate_ids(PROMPT, max_new)


@pytest.mark.parametrize("prompts, error, match", [
    ([[1.0, 2.0]], TypeError, "non-integer token id 1.0"),
    ([[3.7]], TypeError, "non-integer token id 3.7"),
    ([[True, 2]], TypeError, "non-integer token id True"),
    ([np.array([1.5, 2.0])], TypeError, "non-integer"),
    ([["4"]], TypeError, "non-integer"),
    ("abc", TypeError, "list of token id lists"),
    ([5], TypeError, r"prompt_ids\[0\] must be a list"),
    ([[[1, 2]]], TypeError, "non-integer"),
    ([], ValueError, "no prompts"),
    ([[1], []], ValueError, "prompt 1 is empty"),
    ([[1, 10_000]], ValueError, "out of range"),
    ([[-1]], ValueError, "out of range"),
])
def test_bad_token_ids(dec, prompts, error, match):
  with pytest.raises(error, match=match):
    dec.generate_ids(prompts, 4)


def test_numpy_integers_and_arrays_are_accepted(dec):
  a = dec.generate_ids([np.array([3, 5, 7, 9], np.int64)], np.int64(4), seed=np.uint32(1),
                       eos_ids=[-1])
  b = dec.generate_ids(PROMPT, 4, seed=1, eos_ids=[-1])
  assert a == b and len(a[0]) == 4


def test_sampling_is_not_greedy_and_zero_temperature_is(dec):
  greedy = dec.generate_ids(PROMPT, 16, eos_ids=[-1])
  sampled = [dec.generate_ids(PROMPT, 16, temperature=5.0, seed=s, eos_ids=[-1]) for s in (1, 2)]
  assert sampled[0] != sampled[1]
  assert greedy != sampled[0] or greedy != sampled[1]
  assert dec.generate_ids(PROMPT, 16, temperature=0, top_p=0.5, eos_ids=[-1]) == greedy


@pytest.mark.parametrize("max_seq_len", [0, -5, 1.5, True, "64"])
def test_bad_max_seq_len(max_seq_len):
  cfg = llama.config_from_arch(tiny.get_config().model.arch)
  with pytest.raises((TypeError, ValueError), match="max_seq_len"):
    decoder_lib.random_decoder(cfg, max_seq_len=max_seq_len)


def test_generate_refuses_non_string_prompts(dec):
  dec = decoder_lib.Decoder(dec.model, ByteTokenizer(dec.config.vocab_size), source="test",
                            max_seq_len=128)
  with pytest.raises(TypeError, match="prompt 1 must be a string"):
    dec.generate(["hello", 7], 4)
  with pytest.raises(TypeError, match="not a single string"):
    dec.generate("hello", 4)
  with pytest.raises(ValueError, match="prompt 0 is empty"):
    dec.generate(["  "], 4)
  with pytest.raises(TypeError, match="chat"):
    dec.generate(["hello"], 4, chat="yes")
  with pytest.raises(ValueError, match="temperature"):
    dec.generate(["hello"], 4, chat=False, temperature=float("nan"))
  assert isinstance(dec.generate(["hello"], 4, chat=False)[0], str)


# ------------------------------------------------------------------------------ fuzz

def _valid(temperature, top_p, seed) -> bool:
  real = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
  return (real(temperature) and math.isfinite(temperature) and temperature >= 0
          and real(top_p) and math.isfinite(top_p) and 0 < top_p <= 1
          and isinstance(seed, int) and not isinstance(seed, bool)
          and 0 <= seed <= decoder_lib.SEED_RANGE[1])


_ANY = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70),
                 st.booleans(), st.none(), st.text(max_size=3))


@settings(max_examples=300, deadline=None)
@given(temperature=_ANY, top_p=_ANY, seed=_ANY)
def test_fuzz_sampling_arguments(temperature, top_p, seed):
  """Valid triples pass unchanged; every other one raises TypeError/ValueError naming one of
  the three arguments."""
  if _valid(temperature, top_p, seed):
    assert decoder_lib.check_sampling(temperature, top_p, seed) == (
        float(temperature), float(top_p), seed)
  else:
    with pytest.raises((TypeError, ValueError), match="temperature|top_p|seed"):
      decoder_lib.check_sampling(temperature, top_p, seed)


_TOKEN = st.one_of(st.integers(-5, 600), st.floats(allow_nan=True), st.booleans(),
                   st.text(max_size=2))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(_TOKEN, max_size=5), max_size=3))
def test_fuzz_token_rows(rows):
  """Accepted exactly when every row is a non-empty list of int ids in [0, 512)."""
  ok = bool(rows) and all(
      row and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 512 for t in row)
      for row in rows)
  if ok:
    assert [r.tolist() for r in decoder_lib.check_token_rows(rows, 512)] == rows
  else:
    with pytest.raises((TypeError, ValueError), match="prompt"):
      decoder_lib.check_token_rows(rows, 512)


@settings(max_examples=20, deadline=None)
@given(temperature=st.floats(0.0, 4.0), top_p=st.floats(0.01, 1.0),
       seed=st.integers(0, 2**32 - 1), max_new=st.integers(1, 8))
def test_fuzz_valid_generation_returns_tokens_in_vocab(dec, temperature, top_p, seed, max_new):
  out = dec.generate_ids(PROMPT, max_new, temperature=temperature, top_p=top_p, seed=seed,
                         eos_ids=[-1])
  assert len(out) == 1 and len(out[0]) == max_new
  assert all(0 <= t < dec.config.vocab_size for t in out[0])
