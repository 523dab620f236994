"""graphloom_jax.distributed: process set-up without a coordinator, its refusals, the file
barrier and a process's devices."""

import threading

import jax
import pytest

from graphloom_jax import distributed, sharding


def test_processes_without_a_coordinator():
  got = distributed.init_processes(None, 3, 2)
  assert got == distributed.Processes(2, 3, False)
  distributed.sync(got, "no-op without jax.distributed")
  for n, i in ((2, 2), (2, -1), (0, 0)):
    with pytest.raises(ValueError, match=rf"process_id {i} outside \[0, num_processes={n}\)"):
      distributed.init_processes(None, n, i)
  with pytest.raises(ValueError, match="local_device_ids needs a coordinator_address"):
    distributed.init_processes(None, 2, 0, local_device_ids=[0])


def test_file_barrier(tmp_path):
  flag = tmp_path / "ready"
  with pytest.raises(TimeoutError, match=f"waited 0s for {flag}"):
    distributed.wait_for(flag.exists, 0.05, str(flag))
  with pytest.raises(TimeoutError, match="the shards 3, 4"):
    distributed.wait_for(flag.exists, 0.05, lambda: "the shards 3, 4")
  timer = threading.Timer(0.3, flag.touch)
  timer.start()
  distributed.wait_for(flag.exists, 30.0, "the flag")  # returns once the file appears
  timer.join()
  assert flag.exists()


def test_local_devices_name_the_mesh():
  got = distributed.local_devices()
  assert got == {"backend": jax.default_backend(), "local": jax.local_device_count(),
                 "global": jax.device_count(), "mesh": {"data": 1, "model": 1}}
  mesh = sharding.data_parallel_mesh(2)
  assert distributed.local_devices(mesh)["mesh"] == {"data": len(mesh.devices.flat), "model": 1}
