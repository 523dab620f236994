"""Processes that share one job: `jax.distributed` set-up, barriers, and the devices a process
has.

With a coordinator address the processes form one JAX job (`jax.distributed.initialize`) and
`sync` is a barrier over every device; without one, independent processes still cooperate
through files in a folder they all read and write, and `wait_for` is the barrier (a file that
appears).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import jax

from graphloom_jax import sharding


@dataclasses.dataclass(frozen=True)
class Processes:
  index: int
  count: int
  distributed: bool  # through jax.distributed (else: independent processes, file barriers)


def init_processes(coordinator_address: str | None, num_processes: int, process_id: int,
                   local_device_ids: Sequence[int] | None = None) -> Processes:
  """jax.distributed.initialize when a coordinator is given; without one, several processes
  still cooperate through files in a folder they share (`wait_for` is their barrier)."""
  if num_processes < 1 or not 0 <= process_id < num_processes:
    raise ValueError(f"process_id {process_id} outside [0, num_processes={num_processes})")
  if coordinator_address:
    jax.distributed.initialize(coordinator_address, num_processes, process_id,
                               local_device_ids=local_device_ids)
    return Processes(jax.process_index(), jax.process_count(), True)
  if local_device_ids:
    raise ValueError("local_device_ids needs a coordinator_address (jax.distributed)")
  return Processes(process_id, num_processes, False)


def sync(processes: Processes, name: str) -> None:
  """Every process waits here for the others (jax.distributed runs only)."""
  if processes.distributed and processes.count > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


def local_devices(mesh=None) -> dict:
  """This process's devices and the mesh it evaluates on ({"data": n, "model": m}; 1 x 1
  without one)."""
  return {"backend": jax.default_backend(), "local": jax.local_device_count(),
          "global": jax.device_count(), "mesh": sharding.describe(mesh)}


def wait_for(done: Callable[[], bool], timeout_s: float, what) -> None:
  """A file barrier: returns once done() holds, or raises TimeoutError after timeout_s naming
  `what` (a text, or a callable that gives it)."""
  deadline = time.monotonic() + timeout_s
  while not done():
    if time.monotonic() > deadline:
      raise TimeoutError(f"waited {timeout_s:.0f}s for {what() if callable(what) else what}")
    time.sleep(0.2)
