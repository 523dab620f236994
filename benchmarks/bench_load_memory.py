"""Peak host memory of loading a decoder: a random float32 Llama checkpoint of about 2 GB
(sharded safetensors, written here) loaded as bfloat16, each load in a fresh process.

  python benchmarks/bench_load_memory.py [--params_m=490] [--dtype=bfloat16]
                                         [--compare_tree=DIR]

Measured per load: the process's peak resident memory (VmHWM) minus its resident memory just
before the load, against the loaded model's bytes and the largest tensor of the file. Loads:
  streaming   `load_decoder(path, dtype)`: tensor by tensor into the target dtype and devices;
  eager       `weights.load(path)` (the whole checkpoint as float32 host arrays, the form
              conversion uses) then `weights.from_params`;
  compare     `load_decoder` of the graphloom_jax package found in --compare_tree (an older
              checkout, e.g. `git archive <commit> | tar -x -C DIR`), when given.
The acceptance bound for streaming is 1.3 x model bytes + the largest tensor.
"""

import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from absl import app, flags

flags.DEFINE_float("params_m", 490, "parameters of the random checkpoint, millions")
flags.DEFINE_string("dtype", "bfloat16", "dtype to load into")
flags.DEFINE_string("compare_tree", None, "also measure load_decoder from the package here")
flags.DEFINE_string("workdir", None, "where to write the checkpoint (default: a temp dir)")
flags.DEFINE_string("child", None, "internal: run one load in this process (mode name)")
flags.DEFINE_string("path", None, "internal: checkpoint folder for --child")


def _status_kb(field: str) -> int:
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith(field + ":"):
      return int(line.split()[1])
  raise RuntimeError(f"no {field} in /proc/self/status")


def _config(params_m: float) -> dict:
  """A Llama of width 2048 (TinyLlama's shape) with enough layers for ~params_m parameters."""
  d, f, v, heads, kv = 2048, 5632, 32000, 16, 4
  per_layer = 2 * d * d + 2 * d * (d * kv // heads) + 3 * d * f + 2 * d
  layers = max(1, round((params_m * 1e6 - 2 * v * d) / per_layer))
  return dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=v,
              hidden_size=d, intermediate_size=f, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=2048,
              rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


def write_checkpoint(folder: pathlib.Path, params_m: float) -> int:
  """Random float32 safetensors shards of ~500 MB and their index; returns total bytes."""
  import numpy as np
  from safetensors.numpy import save_file

  from graphloom_jax.models import llama, weights

  hf = _config(params_m)
  config = llama.LlamaConfig.from_hf(hf)
  rng = np.random.default_rng(0)
  shard, shards, weight_map, total = {}, [], {}, 0

  def flush():
    if shard:
      name = f"model-{len(shards) + 1:05d}.safetensors"
      save_file(shard, str(folder / name))
      weight_map.update(dict.fromkeys(shard, name))
      shards.append(name)
      shard.clear()

  for name, shape in weights._hf_expected_shapes(config).items():
    shard[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02 if len(shape) > 1
                   else np.ones(shape, np.float32))
    total += shard[name].nbytes
    if sum(t.nbytes for t in shard.values()) > 500e6:
      flush()
  flush()
  (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  (folder / "config.json").write_text(json.dumps(hf))
  return total


def child(mode: str, path: str, dtype: str) -> dict:
  """One load in this process; returns its figures."""
  import jax
  import numpy as np

  from graphloom_jax.models import load_decoder
  jax.devices()  # backend start-up is not part of the load
  before_rss, before_peak = _status_kb("VmRSS"), _status_kb("VmHWM")
  start = time.perf_counter()
  if mode == "eager":
    from graphloom_jax.models import decoder, weights
    _, config, params = weights.load(path)
    model = weights.from_params(config, params, decoder.DTYPES[dtype])
    del params
  else:
    model = load_decoder(path, dtype).model
  seconds = time.perf_counter() - start
  peak = _status_kb("VmHWM")
  leaves = jax.tree.leaves(__import__("flax").nnx.state(model))
  model_bytes = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in leaves)
  return dict(mode=mode, package=os.path.dirname(load_decoder.__code__.co_filename),
              seconds=round(seconds, 1), model_mb=model_bytes / 1e6,
              peak_increase_mb=(peak - before_rss) * 1e3 / 1e6,
              peak_before_load_mb=before_peak * 1e3 / 1e6,
              maxrss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1e3 / 1e6)


def run_child(mode: str, path: pathlib.Path, dtype: str, tree: str) -> dict:
  env = dict(os.environ, PYTHONPATH=tree, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--child={mode}",
                        f"--path={path}", f"--dtype={dtype}"], env=env, cwd=tree,
                       capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv):
  del argv
  f = flags.FLAGS
  if f.child:
    print(json.dumps(child(f.child, f.path, f.dtype)))
    return
  repo = str(pathlib.Path(__file__).resolve().parents[1])
  with tempfile.TemporaryDirectory(dir=f.workdir) as tmp:
    folder = pathlib.Path(tmp) / "ckpt"
    folder.mkdir()
    total = write_checkpoint(folder, f.params_m)
    hf = json.loads((folder / "config.json").read_text())
    largest = max(hf["vocab_size"] * hf["hidden_size"],
                  hf["intermediate_size"] * hf["hidden_size"]) * 4
    print(f"checkpoint: {total / 1e9:.2f} GB float32 in {len(list(folder.glob('*.safetensors')))}"
          f" shards, {hf['num_hidden_layers']} layers; largest tensor {largest / 1e6:.0f} MB; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    runs = [("streaming", repo), ("eager", repo)]
    if f.compare_tree:
      runs.append(("compare", str(pathlib.Path(f.compare_tree).resolve())))
    results = []
    for mode, tree in runs:
      r = run_child("streaming" if mode == "compare" else mode, folder, f.dtype, tree)
      r["mode"] = mode
      r["bound_mb"] = 1.3 * r["model_mb"] + largest / 1e6
      results.append(r)
      print(f"{mode:10s} peak +{r['peak_increase_mb']:7.0f} MB for a {r['model_mb']:.0f} MB "
            f"{f.dtype} model ({r['peak_increase_mb'] / r['model_mb']:.2f}x; bound 1.3x + "
            f"largest = {r['bound_mb']:.0f} MB: "
            f"{'within' if r['peak_increase_mb'] <= r['bound_mb'] else 'ABOVE'}), "
            f"{r['seconds']:.1f} s", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
  app.run(main)
