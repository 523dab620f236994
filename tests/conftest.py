"""Test-wide JAX settings: float32 parity needs the highest matmul precision; 8 CPU devices
let the sharded tests build real meshes."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
