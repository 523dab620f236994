"""Device meshes, the one builder: data-parallel batches and model-parallel decoder parameters.

The mesh has two axes over this process's devices (`jax.make_mesh`, axis types Auto; a mesh a
user made with Explicit axes, `jax.make_mesh`'s default, is used as its Auto twin, `auto_axes`):
  "data"   the rows of every batch the pipeline sends to the decoder (generation, option and
           citation scoring) are split over it: `place_rows` pads them to a multiple of the axis
           by repeating the last row and places them with NamedSharding(mesh, P("data"));
           results are cut back to the real rows (`unpad`). A row never reads another row, so
           each row's output is the one it has on one device.
  "model"  the decoder's parameters are split over it as `llama.PARTITIONS` declares (Megatron
           tensor parallelism: column-parallel Q/K/V and gate/up, row-parallel output and down
           projections, vocabulary-parallel embedding and head; a dimension the axis does not
           divide is replicated, `llama.uneven_shardings`). Everything else (the heads, the
           rotary frequencies) is replicated.

The config selects it (`config.mesh`, read by `mesh_from_config`):
  mesh.model  devices on "model"; 0 = every local device
  mesh.data   devices on "data"; 0 = every local device not on "model" (local count // model)
data x model = 1 x 1 is no mesh at all: arrays stay on the default device, as without this
module. Only this process's devices (`jax.local_devices()`) are used: across processes
examples are sharded by `evaluation.sharded`, each process running its own mesh. Training uses
`data_parallel_mesh` (the batch split over every device that divides it, "model" 1).

Placing a decoder on a mesh: `models.decoder.from_config(model_cfg, mesh=)` and
`load_decoder(path, mesh=)` (checkpoints stream into their shards), `llama.shard_model` for a
model built on one device.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

AXES = ("data", "model")


def mesh_shape(data: int, model: int, num_devices: int) -> tuple[int, int]:
  """(data, model) with the 0 defaults resolved over `num_devices`; errors name the keys."""
  for name, n in (("mesh.data", data), ("mesh.model", model)):
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
      raise ValueError(f"config.{name}={n!r} must be an integer >= 0 (0 = every local device)")
  model = int(model) or num_devices
  if model > num_devices or num_devices % model:
    raise ValueError(f"config.mesh.model={model} does not divide this process's "
                     f"{num_devices} local devices")
  data = int(data) or num_devices // model
  if data * model > num_devices:
    raise ValueError(f"config.mesh.data x mesh.model = {data} x {model} needs {data * model} "
                     f"devices; this process has {num_devices}")
  return data, model


def _build(data: int, model: int, devices) -> jax.sharding.Mesh:
  return jax.make_mesh((data, model), AXES, axis_types=(AxisType.Auto,) * 2,
                       devices=devices[:data * model])


def make_mesh(data: int, model: int, devices=None) -> jax.sharding.Mesh | None:
  """A ("data", "model") mesh over the first data * model of `devices` (default: the local
  devices), or None for 1 x 1."""
  devices = list(jax.local_devices() if devices is None else devices)
  data, model = mesh_shape(data, model, len(devices))
  if data * model == 1:
    return None
  return _build(data, model, devices)


def data_parallel_mesh(batch_size: int, devices=None) -> jax.sharding.Mesh:
  """The trainer's mesh: "data" over the largest number of `devices` (default: all) that
  divides the batch, "model" 1 (the decoder is frozen and replicated)."""
  devices = list(jax.devices() if devices is None else devices)
  n = max(d for d in range(1, len(devices) + 1) if batch_size % d == 0)
  return _build(n, 1, devices)


def auto_axes(mesh: jax.sharding.Mesh | None) -> jax.sharding.Mesh | None:
  """`mesh` with every axis of type Auto (the same devices and names). The decoder's parameter
  shardings are annotations that XLA propagates (Auto); on an Explicit mesh, sharding in types
  would reject the embedding gather of vocabulary-split tables."""
  if mesh is None or all(t == AxisType.Auto for t in mesh.axis_types):
    return mesh
  return jax.sharding.Mesh(mesh.devices, mesh.axis_names,
                           axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def mesh_from_config(config, devices=None) -> jax.sharding.Mesh | None:
  """The mesh `config.mesh` selects (module docstring)."""
  return make_mesh(config.mesh.data, config.mesh.model, devices)


def describe(mesh: jax.sharding.Mesh | None) -> dict[str, int]:
  """{"data": n, "model": m} of a mesh (1 x 1 without one)."""
  return {"data": 1, "model": 1} if mesh is None else {a: int(mesh.shape[a]) for a in AXES}


def data_size(mesh: jax.sharding.Mesh | None) -> int:
  return 1 if mesh is None else int(mesh.shape["data"])


# ------------------------------------------------------------------------------ rows

def pad_rows(arrays: Mapping[str, Any], multiple: int) -> tuple[dict[str, np.ndarray], int]:
  """Every array [N, ...] padded along its first axis to a multiple of `multiple` by repeating
  its last row; returns (padded, N). All arrays must have the same N >= 1."""
  arrays = {k: np.asarray(v) for k, v in arrays.items()}
  sizes = {v.shape[0] for v in arrays.values()}
  if len(sizes) != 1:
    raise ValueError(f"rows of different lengths: { {k: v.shape[0] for k, v in arrays.items()} }")
  n = sizes.pop()
  if n < 1:
    raise ValueError("pad_rows: no rows")
  extra = -n % multiple
  if extra:
    arrays = {k: np.concatenate([v, np.repeat(v[-1:], extra, axis=0)]) for k, v in
              arrays.items()}
  return arrays, n


def row_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, P("data"))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def place_rows(arrays: Mapping[str, Any], mesh: jax.sharding.Mesh | None
               ) -> tuple[dict[str, jax.Array], int]:
  """(arrays padded to a multiple of the data axis and split over it, the real row count).
  Without a mesh: the arrays as jax arrays on the default device, unpadded."""
  if mesh is None:
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    n = next(iter(arrays.values())).shape[0]
    return {k: jax.numpy.asarray(v) for k, v in arrays.items()}, n
  padded, n = pad_rows(arrays, data_size(mesh))
  sharding = row_sharding(mesh)
  return {k: jax.device_put(v, sharding) for k, v in padded.items()}, n


def pad_list(items: list, multiple: int) -> list:
  """`items` padded to a multiple of `multiple` with copies of its last element."""
  return list(items) + [items[-1]] * (-len(items) % multiple)


def unpad(x, n: int) -> np.ndarray:
  """The first n rows of a (possibly sharded) result, on the host."""
  return np.asarray(x)[:n]


# ------------------------------------------------------------------------------ parameters

def replicate(module: nnx.Module, mesh: jax.sharding.Mesh | None) -> nnx.Module:
  """Every array of `module` replicated over the mesh, in place (returned for chaining)."""
  if mesh is None:
    return module
  sharding = replicated(mesh)
  state = nnx.state(module)
  nnx.update(module, jax.tree.map(lambda x: jax.device_put(x, sharding), state))
  return module


def check_on_mesh(decoder, mesh: jax.sharding.Mesh | None) -> None:
  """The decoder's parameters must live on `mesh`'s devices (on one device without a mesh):
  jitted calls cannot mix arrays of different device sets."""
  embed = decoder.model.embed.value
  where = set(embed.sharding.device_set) if hasattr(embed, "sharding") else set()
  want = set(mesh.devices.flat) if mesh is not None else None
  if mesh is None:
    if len(where) > 1:
      raise ValueError(f"the decoder's parameters are spread over {len(where)} devices; pass "
                       "the mesh they are on (GraphLoom(..., mesh=) / from_config)")
  elif where != want:
    raise ValueError(f"the decoder's parameters are on {len(where)} device(s), not on the "
                     f"mesh's {len(want)}: load it onto the mesh (decoder.from_config(model_cfg, "
                     "mesh=), load_decoder(path, mesh=) or GraphLoom.from_config(config, "
                     "mesh=))")
