"""Small stand-ins shared by the tests."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


class HashEmbed:
  """Deterministic fake sentence embedder: unit vectors [16] seeded by the text's bytes, so a
  text always gets the same vector (in any process) and distinct texts nearly orthogonal ones.
  Callable and with `embed`, like the real embedders."""
  model_id = "hash-16"

  def embed(self, texts):
    out = []
    for t in texts:
      rng = np.random.default_rng(int.from_bytes(t.encode()[:64].ljust(8, b"\0")[-8:], "little")
                                  ^ len(t))
      v = rng.standard_normal(16)
      out.append(v / np.linalg.norm(v))
    return np.asarray(out, np.float32)

  __call__ = embed


def same_json(a, b, path=""):
  """Equal JSON values, floats to float32 rounding (reductions split over devices sum in
  another order)."""
  if isinstance(a, dict):
    assert isinstance(b, dict) and sorted(a) == sorted(b), path
    for k in a:
      same_json(a[k], b[k], f"{path}.{k}")
  elif isinstance(a, list):
    assert isinstance(b, list) and len(a) == len(b), path
    for i, (x, y) in enumerate(zip(a, b)):
      same_json(x, y, f"{path}[{i}]")
  elif isinstance(a, float) and not isinstance(b, bool):
    assert b == pytest.approx(a, rel=1e-5, abs=1e-6), path
  else:
    assert a == b, path


def tensorboard_scalars(folder):
  """(tag, step, value) of every scalar in the event files, read as raw TFRecords."""
  import struct

  from tensorboardX.proto import event_pb2

  out = []
  for path in sorted(folder.glob("events.*")):
    data, pos = path.read_bytes(), 0
    while pos < len(data):
      (n,) = struct.unpack("<Q", data[pos:pos + 8])
      event = event_pb2.Event()
      event.ParseFromString(data[pos + 12:pos + 12 + n])
      pos += 12 + n + 4
      out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
  return out


# Our stacked parameter names -> the Hugging Face Llama names of one layer's tensor.
HF_LAYER_NAMES = {
    "attn_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight", "mlp_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
}


def hf_tensors(config, params):
  """Our checkpoint layout (stacked layers, Q/K/V as [heads, head_dim, hidden], O as
  [hidden, heads, head_dim]) back to Hugging Face's names and PyTorch layout ([out, in]),
  written here independently of the loaders in graphloom_jax.models.weights, which are tested
  against it."""
  out = {"model.embed_tokens.weight": params["embed"], "model.norm.weight": params["final_norm"]}
  if not config.tie_word_embeddings:
    out["lm_head.weight"] = params["lm_head"]
  for ours, hf in HF_LAYER_NAMES.items():
    for i in range(config.num_layers):
      w = np.asarray(params[ours][i])
      if ours in ("wq", "wk", "wv"):
        w = w.reshape(-1, config.hidden_size)
      elif ours == "wo":
        w = w.reshape(config.hidden_size, -1)
      out[f"model.layers.{i}.{hf}"] = w
  return {k: np.ascontiguousarray(v) for k, v in out.items()}


def assert_usage_errors(argv, cases, workdir):
  """Runs `python -m *argv --workdir=workdir *extra` from the clone for each (extra, message)
  of `cases`: each must exit 1 with `message` in its output and no traceback, and the workdir
  must not be created."""
  for extra, message in cases:
    r = subprocess.run([sys.executable, "-m", *argv, f"--workdir={workdir}", *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and message in r.stderr + r.stdout, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
  assert not pathlib.Path(workdir).exists()


def tiny_open_answer_system():
  """GraphLoom with the tiny config (random decoder and heads, hashed embeddings), entity names
  as the KB writes them, short answers: the system of the PathQuestion / WorldCup2014 row tests."""
  from graphloom_jax.configs import tiny
  from graphloom_jax.models import decoder as decoder_lib
  from graphloom_jax.pipeline import GraphLoom, graphloom

  cfg = tiny.get_config()
  cfg.graph.singularize = False
  cfg.decode.max_new_tokens = 4
  dec = decoder_lib.from_config(cfg.model)
  return GraphLoom(cfg, dec, HashEmbed(), graphloom.new_heads(cfg, dec, 16, seed=1),
                   kb_sources=[])
