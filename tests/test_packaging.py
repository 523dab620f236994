"""Declared dependencies are exactly what the code imports: every third-party import of the
package, the launchers, configs, benchmarks and tests is declared (the default path's in the
runtime requirements, optional ones in their extra, the tests' in [test]); every declared
distribution is imported somewhere or says why not; optional modules are reached only through
`graphloom_jax.optional`; constraints.txt pins every declared distribution. Then the wheel that
`pip install .` installs holds one top-level package (graphloom_jax, with the launchers and
configs inside it) and its data, and, unpacked outside the clone in a process where the optional
modules cannot be imported (what an install without extras gives), the whole package imports,
the main job answers a question with the tiny config, and each optional path fails with a
message naming its extra.

The declared side is read from the installed distribution's metadata
(`importlib.metadata.requires`), the import side from the sources with `ast`, and import names
are mapped to distributions with `importlib.metadata.packages_distributions`.
"""

import ast
import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from graphloom_jax import optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
OWN = {"graphloom_jax", "launch", "configs", "benchmarks", "tests", "fakes", "conftest",
       "device_check", "test_trainer"}
# Declared without being imported by this project, and why.
NOT_IMPORTED = {
    "array-record": "TFDS reads and writes array_record files with it",
    "importlib-resources": "TFDS resolves a builder's code path with it",
    "jinja2": "transformers renders the decoder's chat template with it",
    "tensorboard": "the viewer of the [tensorboard] extra (a command, not an import)",
    "pytest-xdist": "pytest -n 2 (a plugin, not an import)",
    "accelerate": "transformers loads the GGUF reference decoder in test_smollm2 with it",
}


def _canonical(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, set[str]]:
  """Distribution -> the extras that declare it ("" = a runtime requirement)."""
  out: dict[str, set[str]] = {}
  for req in importlib.metadata.requires("graphloom_jax") or []:
    name = _canonical(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
    extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", req)
    out.setdefault(name, set()).add(extra.group(1) if extra else "")
  return out


def _imports(path: pathlib.Path) -> list[tuple[str, bool]]:
  """(module, at module level) for every absolute import and `optional.require("...")` call."""
  tree = ast.parse(path.read_text(), str(path))
  top_level = {id(n) for n in tree.body}
  for node in tree.body:  # imports under a module-level `if` / `try` run at import time too
    if isinstance(node, (ast.If, ast.Try)):
      top_level |= {id(n) for n in ast.walk(node)}
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out += [(a.name, id(node) in top_level) for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      out.append((node.module, id(node) in top_level))
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "require" and isinstance(node.func.value, ast.Name)
          and node.func.value.id == "optional" and node.args
          and isinstance(node.args[0], ast.Constant)):
      out.append((node.args[0].value, False))
  return out


def _third_party(module: str) -> str | None:
  top = module.split(".")[0]
  return None if top in sys.stdlib_module_names or top in OWN else top


def _sources(*folders):
  return [p for f in folders for p in (ROOT / f).rglob("*.py")]


def _distributions(module: str) -> set[str]:
  """The distributions that install `module`'s top-level name: packages_distributions, else
  (a top-level extension module such as scann_pybind, which no top_level.txt names) the
  distribution whose RECORD holds a top-level file of that name."""
  top = module.split(".")[0]
  found = importlib.metadata.packages_distributions().get(top)
  if found:
    return {_canonical(d) for d in found}
  return {_canonical(d.metadata["Name"]) for d in importlib.metadata.distributions()
          if any(len(f.parts) == 1 and f.name.split(".")[0] == top for f in d.files or [])}


def test_every_import_is_declared_where_its_path_needs_it():
  declared = _declared()
  missing = []
  for folder, allowed in (("graphloom_jax", None), ("launch", None), ("configs", None),
                          ("benchmarks", None), ("tests", {"test"})):
    for path in _sources(folder):
      for module, at_import in _imports(path):
        top = _third_party(module)
        if top is None or path.name == "optional.py":
          continue
        dists = _distributions(module)
        assert dists, f"{path.relative_to(ROOT)} imports {module!r}, which no installed " \
                      f"distribution provides"
        extras = set().union(*(declared.get(d, set()) for d in dists))
        if not extras:
          missing.append(f"{path.relative_to(ROOT)}: {module} ({', '.join(sorted(dists))})")
        elif folder == "graphloom_jax" and at_import and "" not in extras:
          missing.append(f"{path.relative_to(ROOT)}: {module} is optional ({sorted(extras)}) "
                         f"but imported at module level")
        elif allowed and not extras & (allowed | {""}):
          missing.append(f"{path.relative_to(ROOT)}: {module} is not in {sorted(allowed)}")
  assert not missing, "\n".join(missing)


def test_every_declared_distribution_is_imported():
  used = set()
  for path in _sources("graphloom_jax", "launch", "configs", "benchmarks", "tests"):
    for module, _ in _imports(path):
      if _third_party(module):
        used |= _distributions(module)
  unused = sorted(d for d in _declared() if d not in used and d not in NOT_IMPORTED)
  assert not unused, f"declared and never imported: {unused}"
  declared = _declared()
  assert {"chex", "jaxtyping"}.isdisjoint(declared)
  assert declared.get("accelerate") == {"test"}, "accelerate is a test-only requirement"


def test_optional_modules_are_imported_only_through_optional_require():
  for path in _sources("graphloom_jax"):
    if path.name == "optional.py":
      continue
    for module, _ in _imports(path):
      for name in optional.EXTRAS:
        if module == name or module.startswith(name + "."):
          # require() calls are recorded with at_import False and a string argument; a plain
          # import statement of an optional module is what this rules out.
          text = path.read_text()
          assert re.search(rf"optional\.require\(\s*\"{re.escape(module)}\"", text), (
              f"{path.relative_to(ROOT)} imports {module} directly")


def test_constraints_pin_every_declared_distribution():
  pins = {}
  for line in (ROOT / "constraints.txt").read_text().splitlines():
    line = line.split("#")[0].strip()
    if line:
      name, version = line.split("==")
      pins[_canonical(name)] = version
  for dist in _declared():
    assert dist in pins, f"constraints.txt does not pin {dist}"
    assert "+" not in pins[dist], f"{dist}=={pins[dist]}: a local version label"
  for dist, version in pins.items():
    if dist not in _declared() or dist == "torch":  # torch's wheel adds a +cpu label
      continue
    try:
      installed = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:  # an extra the tests do not install
      continue
    assert installed == version, f"{dist}: constraints.txt {version}, installed {installed}"


def test_require_names_the_extra():
  with pytest.raises(ImportError, match=r"\[beam\] extra.*graphloom_jax\[beam\]"):
    optional.require("apache_beam.no_such_module", "a test")
  with pytest.raises(ValueError, match="not an optional dependency"):
    optional.require("numpy", "a test")
  assert optional.available("numpy") and not optional.available("no_such_module_here")


BLOCKED = """
import sys
for name in {blocked!r}:
  sys.modules[name] = None  # import raises ImportError; importlib.util.find_spec gives None
"""

WITHOUT_EXTRAS = BLOCKED + """
import importlib, pathlib, runpy
import graphloom_jax
from graphloom_jax import optional
root = pathlib.Path(graphloom_jax.__file__).parent
assert root.is_relative_to({site!r}), root  # the wheel's copy, not the clone
for path in sorted(root.rglob("*.py")):
  name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
  if name.startswith("graphloom_jax.launch."):
    continue  # each launcher defines its flags: one per process (the main job's below)
  try:
    importlib.import_module(name)
  except ImportError as e:
    assert name == "graphloom_jax.data.beam_graphs", (name, e)
    assert "[beam] extra" in str(e), e
    print("refused", name)
from graphloom_jax.retrieval import index
import numpy as np
try:
  index.ScannIndex(np.eye(4, dtype=np.float32))
except ImportError as e:
  assert "[scann] extra" in str(e), e
  print("refused ScannIndex")
from graphloom_jax.training import metric_writers
assert metric_writers.summary_writer(pathlib.Path("tb")) is None
# The main job (launch.answer) on the tiny config, with freshly initialised heads.
from graphloom_jax.configs import tiny
from graphloom_jax.models import decoder as decoder_lib
from graphloom_jax.pipeline import graphloom
config = tiny.get_config()
dec = decoder_lib.from_config(config.model)
heads = graphloom.new_heads(config, dec, 384, seed=0)
graphloom.save_heads(heads, {heads_dir!r}, config)
sys.argv = ["graphloom-answer", "--config=configs/tiny.py", "--heads={heads_dir}",
            "--num_examples=1", "--batch_size=1"]
runpy.run_module("graphloom_jax.launch.answer", run_name="__main__")
"""


def _install_wheel(tmp_path) -> pathlib.Path:
  """What `pip install .` puts in site-packages: the wheel built from a copy of the sources,
  unpacked into a folder outside the clone."""
  src = tmp_path / "src"
  src.mkdir()
  for name in ("setup.py", "README.md", "LICENSE", "NOTICE"):
    shutil.copy(ROOT / name, src / name)
  for name in ("graphloom_jax", "launch", "configs"):
    shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
  proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                         "--no-build-isolation", "--no-index", ".", "-w", "dist"], cwd=src,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  (wheel,) = (src / "dist").glob("graphloom_jax-*.whl")
  site = tmp_path / "site"
  with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    z.extractall(site)
  assert {n.split("/")[0] for n in names} == {"graphloom_jax", wheel.name.split("-py3")[0]
                                                + ".dist-info"}, sorted(names)[:20]
  for needed in ("graphloom_jax/launch/answer.py", "graphloom_jax/configs/tiny.py",
                 "graphloom_jax/resources/heads/smollm2/heads.safetensors",
                 "graphloom_jax/resources/heads/smollm2/adapters/no_retrieval_tuned/heads.json",
                 "graphloom_jax/resources/heads/smollm2/adapters/flat_rag_tuned/heads.json",
                 "graphloom_jax/data/resources/scenekb_v3/MMQA_test.jsonl.gz",
                 "graphloom_jax/data/resources/wordnet/data.noun"):
    assert needed in names, needed
  return site


def test_without_extras_the_installed_wheel_imports_and_the_main_job_runs(tmp_path):
  site = _install_wheel(tmp_path)
  blocked = sorted(optional.EXTRAS)
  outside = tmp_path / "work"
  outside.mkdir()
  code = WITHOUT_EXTRAS.format(blocked=blocked, heads_dir=str(tmp_path / "heads"),
                               site=str(site))
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(site))
  proc = subprocess.run([sys.executable, "-c", code], cwd=outside, env=env, capture_output=True,
                        text=True, timeout=900)
  out = proc.stdout + proc.stderr
  assert proc.returncode == 0, out[-4000:]
  assert "refused graphloom_jax.data.beam_graphs" in out and "refused ScannIndex" in out
  assert "EM" in out, out[-2000:]
