"""Every launcher follows the same conventions (launch.common.run): `--help` lists its --config,
a bad flag, a config typo or a stray argument exits 1 with one line naming it (no traceback,
no usage text), JAX's options are flags, and the old names of the output and count flags are
aliases of the new ones. The launchers run as installed console scripts (`graphloom-answer`)
from a folder outside the clone, and as `python -m launch.answer` inside it."""

import importlib.metadata
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCHERS = sorted(p.stem for p in (ROOT / "launch").glob("*.py")
                   if p.stem not in ("__init__", "common"))
# Launchers that read a config file: all but build_wordnet_resources, the maintainers' tool that
# regenerates the committed WordNet excerpts, which has no setting but its input and output paths.
WITH_CONFIG = {"answer", "build_graphs", "convert", "evaluate", "evaluate_retrieval", "generate",
               "retrieve", "train", "train_grail"}


def _script(name):
  return f"graphloom-{name.replace('_', '-')}"


def _run(name, *args, cwd, module=False):
  """The launcher as its console script (or with module=True as `python -m launch.NAME`)."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  cmd = ([sys.executable, "-m", f"launch.{name}"] if module
         else [str(pathlib.Path(sys.executable).parent / _script(name))])
  proc = subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=300)
  return proc.returncode, proc.stdout, proc.stderr


def _one_error_line(name, rc, out, err, prog=None):
  lines = [line for line in err.splitlines() if line.strip()]
  assert rc == 1, (rc, out[-2000:], err[-2000:])
  prog = prog or _script(name)
  assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err[-3000:]
  assert not out.strip(), out[-2000:]
  return lines[0]


def test_each_launcher_is_a_console_script_and_no_top_level_package_is_installed(tmp_path):
  scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")
             if e.dist is not None and e.dist.name == "graphloom_jax"}
  assert scripts == {_script(n): f"graphloom_jax.launch.{n}:cli" for n in LAUNCHERS}
  top = importlib.metadata.distribution("graphloom_jax").read_text("top_level.txt")
  assert top is None or top.split() == ["graphloom_jax"], top
  # outside the clone, launch/ and configs/ are reachable only inside the package
  code = ("import importlib.util as u, graphloom_jax.launch.answer, graphloom_jax.configs.tiny;"
          "print(u.find_spec('launch'), u.find_spec('configs'))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                        text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0 and proc.stdout.split() == ["None", "None"], proc.stderr[-2000:]


def test_generate_reads_the_model_from_the_config_and_its_flags_replace_keys(tmp_path):
  args = ("--prompt=Hi", "--max_new_tokens=2", "--chat=false")
  rc, out, err = _run("generate", *args, "--config.model.max_seq_len=2", cwd=tmp_path)
  assert "leaves no room for the prompt in a max_seq_len of 2" in _one_error_line(
      "generate", rc, out, err)
  rc, out, err = _run("generate", *args, "--config.model.max_seq_len=2", "--max_seq_len=32",
                      cwd=tmp_path)  # the flag replaces the key: the embedded model answers
  assert rc == 0 and len(out.strip().splitlines()) == 1, err[-3000:]
  rc, out, err = _run("generate", *args, "--weights=nowhere.gguf", cwd=tmp_path)
  assert "--weights=nowhere.gguf: no such file" in _one_error_line("generate", rc, out, err)


def test_python_m_from_the_clone_follows_the_same_conventions():
  rc, out, err = _run("train", "--config.modle.dtype=float32", cwd=ROOT, module=True)
  line = _one_error_line("train", rc, out, err, prog="launch.train")
  assert "did you mean 'model'?" in line, line
  _, out, err = _run("train", "--help", cwd=ROOT, module=True)
  assert out.split("launch/train.py:\n", 1)[1].startswith("  --config:"), out[-3000:]


def test_every_launcher_module_is_covered():
  assert WITH_CONFIG <= set(LAUNCHERS) and len(LAUNCHERS) >= 10, LAUNCHERS
  for name in LAUNCHERS:
    text = (ROOT / "launch" / f"{name}.py").read_text()
    assert "common.run(main" in text and "app.run(" not in text, name


@pytest.mark.parametrize("name", sorted(WITH_CONFIG))
def test_help_lists_the_config_flag_and_keeps_usage_lines(name, tmp_path):
  _, out, err = _run(name, "--help", cwd=tmp_path)  # (absl exits 1 after --help)
  assert not err.strip(), err[-2000:]
  own = out.split(f"{_script(name)}:\n", 1)
  assert len(own) == 2, out[:3000]
  assert "\n  --config:" in "\n" + own[1].split("\n\n")[0], out[-3000:]  # its own section
  # a docstring's line continuation stays a line break in the usage text
  for line in out.split("flags:", 1)[0].splitlines():
    assert len(line) <= 100, line


# (build_graphs hands the flags it does not define to Beam as pipeline options)
@pytest.mark.parametrize("name", sorted(set(LAUNCHERS) - {"build_graphs"}))
def test_bad_flag_is_one_line(name, tmp_path):
  rc, out, err = _run(name, "--no_such_flag_here=1", cwd=tmp_path)
  line = _one_error_line(name, rc, out, err)
  assert "no_such_flag_here" in line


@pytest.mark.parametrize("name", sorted(WITH_CONFIG))
def test_config_typo_is_one_line_naming_the_key(name, tmp_path):
  section = "grail" if name in ("train_grail", "evaluate_retrieval") else "model"
  rc, out, err = _run(name, f"--config.{section}.no_such_kee=3", cwd=tmp_path)
  line = _one_error_line(name, rc, out, err)
  assert f"--config.{section}.no_such_kee: the config has no key 'no_such_kee'" in line, line
  rc, out, err = _run(name, "--config.modle.dtype=float32", cwd=tmp_path)
  line = _one_error_line(name, rc, out, err)
  assert "'modle'" in line and "did you mean 'model'?" in line, line


@pytest.mark.parametrize("name", sorted(set(LAUNCHERS) - {"build_graphs"}))
def test_stray_argument_is_an_error(name, tmp_path):
  required = {"convert": ["--workdir=o"], "evaluate": ["--workdir=o"], "train": ["--workdir=o"],
              "evaluate_retrieval": ["--task=sequential_pool", "--workdir=o"],
              "train_grail": ["--workdir=o"], "generate": ["--prompt=Hi"]}.get(name, [])
  rc, out, err = _run(name, *required, "stray", cwd=tmp_path)
  line = _one_error_line(name, rc, out, err)
  assert "unexpected arguments ['stray']" in line
  assert not any(tmp_path.iterdir())


def test_usage_error_is_one_line_without_usage_text(tmp_path):
  rc, out, err = _run("evaluate", "--dataset=scienceqa", f"--workdir={tmp_path / 'o'}",
                      "--mode=no_retrieval", cwd=tmp_path)
  line = _one_error_line("evaluate", rc, out, err)
  assert "manual" in line.lower(), line


def test_jax_options_are_flags(tmp_path):
  _, out, err = _run("convert", "--helpfull", cwd=tmp_path)
  assert "--jax_platforms:" in out and "--[no]jax_enable_x64:" in out, err[-2000:]
  rc, out, err = _run("convert", "--jax_enable_x64=maybe", cwd=tmp_path)
  assert "jax_enable_x64" in _one_error_line("convert", rc, out, err)


@pytest.mark.parametrize("name, old, new", [
    ("evaluate", "--output_dir", "--workdir"), ("evaluate_retrieval", "--output_dir", "--workdir"),
    ("train_grail", "--output_dir", "--workdir"), ("convert", "--output", "--workdir"),
    ("answer", "--predictions", "--output"), ("build_wordnet_resources", "--out", "--workdir"),
])
def test_old_output_flag_names_are_aliases(name, old, new, tmp_path):
  (tmp_path / "a_file").write_text("x")
  extra = {"evaluate_retrieval": ["--task=sequential_pool"]}.get(name, [])
  if name == "build_wordnet_resources":
    extra = [f"--wordnet_dir={tmp_path}", f"--vocab={tmp_path / 'a_file'}",
             f"--license={tmp_path / 'a_file'}"]
  target = "." if new == "--output" else "a_file"
  rc, out, err = _run(name, f"{old}={target}", *extra, cwd=tmp_path)
  line = _one_error_line(name, rc, out, err)
  assert f"{new}={target}: is a" in line, line
