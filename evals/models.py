"""Model specs for evaluation: parsing, loading, and weight fingerprints.

A `--models` argument is a comma-separated list of `name=spec` (or a bare `spec`, named after it). A spec is

  - an embedded model name ("smollm2-135m-instruct"), a Hugging Face checkpoint directory or a .gguf file;
  - a PEFT adapter directory (adapter_config.json + adapter_model.safetensors): its base is the config's
    base_model_name_or_path, or `--base` when that is missing;
  - a training workdir (config.json + checkpoints/): the run's base model with its latest LoRA checkpoint
    merged in, or, for a full-parameter run (finetune="full"), its latest parameters;
  - several of the above joined with '+' (e.g. training seeds): one contestant whose members each answer
    every prompt, all their comparisons counting for that name;
  - `shuffled:<spec>`: that model's answers with their words shuffled (seeded), a known-worse contestant.

Every member has a `fingerprint`, a sha256 over its weights' bytes (base files + adapter tensors), not its
path: caches key on it, so retrained weights never meet stale answers. File hashes are remembered by
(path, size, mtime) in `<cache_dir>/file_hashes.json`.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import logging
import os
import threading
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SHUFFLED = "shuffled:"


class ModelSpecError(ValueError):
    """A --models entry that cannot be understood; the message names the entry."""


# ---------------------------------------------------------------------------------------------
# Spec parsing


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    """One loadable model: kind in {embedded, hf, gguf, peft, workdir}; `shuffled` wraps it."""

    kind: str
    path: str  # embedded name, directory or file
    base: str | None = None  # peft: the base model spec
    shuffled: bool = False

    @property
    def label(self) -> str:
        return (SHUFFLED if self.shuffled else "") + self.path


@dataclasses.dataclass(frozen=True)
class Contestant:
    name: str
    members: tuple[MemberSpec, ...]


def _is_embedded(name: str) -> bool:
    from rubric_jax.models.loading import is_embedded

    return is_embedded(name)


def classify(spec: str, *, base: str | None = None) -> MemberSpec:
    """The MemberSpec of one (non-'+') spec; ModelSpecError when it names nothing loadable."""
    spec = spec.strip()
    if not spec:
        raise ModelSpecError("empty model spec")
    if spec.startswith(SHUFFLED):
        inner = classify(spec[len(SHUFFLED):], base=base)
        if inner.shuffled:
            raise ModelSpecError(f"{spec!r}: shuffled: cannot be nested")
        return dataclasses.replace(inner, shuffled=True)
    if spec.startswith("openai:"):
        raise ModelSpecError(f"{spec!r}: remote models can judge (--judge) but cannot be evaluated as contestants")
    if not os.path.exists(spec):
        if _is_embedded(spec):
            return MemberSpec("embedded", spec)
        raise ModelSpecError(f"{spec!r}: no such file or directory, and not an embedded model name")
    path = os.path.abspath(spec)
    if os.path.isfile(path):
        if path.endswith(".gguf"):
            return MemberSpec("gguf", path)
        raise ModelSpecError(f"{spec!r}: a file that is not a .gguf checkpoint")
    if os.path.exists(os.path.join(path, "adapter_config.json")):
        with open(os.path.join(path, "adapter_config.json")) as f:
            acfg = json.load(f)
        b = acfg.get("base_model_name_or_path") or base
        if not b:
            raise ModelSpecError(f"{spec!r}: PEFT adapter without base_model_name_or_path; give --base")
        if not os.path.exists(os.path.join(path, "adapter_model.safetensors")):
            raise ModelSpecError(f"{spec!r}: PEFT adapter directory without adapter_model.safetensors")
        binner = classify(b)
        if binner.kind in ("peft", "workdir") or binner.shuffled:
            raise ModelSpecError(f"{spec!r}: the adapter's base {b!r} must be a plain checkpoint")
        return MemberSpec("peft", path, base=binner.path)
    from rubric_jax.rl.workdir import is_workdir

    if is_workdir(path) and os.path.exists(os.path.join(path, "config.json")):
        from rubric_jax.rl.checkpoint import Checkpointer  # noqa: F401  (fail early if orbax is missing)

        if not [d for d in os.listdir(os.path.join(path, "checkpoints")) if d.isdigit()]:
            raise ModelSpecError(f"{spec!r}: training workdir without any checkpoint in checkpoints/")
        return MemberSpec("workdir", path)
    if os.path.exists(os.path.join(path, "config.json")) and (
            glob.glob(os.path.join(path, "*.safetensors")) or os.path.exists(os.path.join(path, "model.safetensors.index.json"))):
        return MemberSpec("hf", path)
    raise ModelSpecError(f"{spec!r}: a directory that is neither a Hugging Face checkpoint (config.json + "
                         f"*.safetensors), a PEFT adapter (adapter_config.json) nor a training workdir "
                         f"(config.json + checkpoints/)")


def parse_models(arg: str, *, base: str | None = None) -> list[Contestant]:
    """`name=spec[+spec...],...` -> contestants. Errors: empty list, duplicate names, bad specs."""
    if not arg or not arg.strip():
        raise ModelSpecError("--models: give at least two models as name=spec,name=spec")
    out: list[Contestant] = []
    for entry in arg.split(","):
        entry = entry.strip()
        if not entry:
            raise ModelSpecError(f"--models: empty entry in {arg!r}")
        if "=" in entry:
            name, spec = entry.split("=", 1)
            name = name.strip()
            if not name:
                raise ModelSpecError(f"--models: entry {entry!r} has an empty name")
        else:
            name, spec = os.path.basename(entry.rstrip("/")) or entry, entry
        parts = spec.split("+")
        if any(not p.strip() for p in parts):
            raise ModelSpecError(f"--models: {name}: empty member in {spec!r}")
        try:
            members = tuple(classify(p, base=base) for p in parts)
        except ModelSpecError as e:
            raise ModelSpecError(f"--models: {name}: {e}") from None
        if len(set(members)) != len(members):
            raise ModelSpecError(f"--models: {name}: the same model is listed twice in {spec!r}")
        if any(c.name == name for c in out):
            raise ModelSpecError(f"--models: duplicate name {name!r}")
        out.append(Contestant(name, members))
    return out


# ---------------------------------------------------------------------------------------------
# Fingerprints

_HASH_LOCK = threading.Lock()


def file_sha256(path: str, cache_dir: str | None = None) -> str:
    """sha256 of a file's bytes, remembered by (path, size, mtime) in cache_dir/file_hashes.json."""
    path = os.path.realpath(path)
    st = os.stat(path)
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    db_path = os.path.join(cache_dir, "file_hashes.json") if cache_dir else None
    db: dict[str, str] = {}
    if db_path and os.path.exists(db_path):
        try:
            with open(db_path) as f:
                db = json.load(f)
        except (OSError, ValueError):
            db = {}
    if key in db:
        return db[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if db_path:
        with _HASH_LOCK:
            os.makedirs(cache_dir, exist_ok=True)
            db[key] = digest
            tmp = db_path + f".tmp{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(db, f)
            os.replace(tmp, db_path)
    return digest


def checkpoint_weight_files(path: str) -> list[str]:
    """The files holding a plain checkpoint's weights (embedded name, .gguf or HF directory)."""
    from rubric_jax.models.loading import resolve_checkpoint

    p = resolve_checkpoint(path)
    if os.path.isfile(p):
        return [p]
    files = sorted(glob.glob(os.path.join(p, "*.safetensors")))
    if not files:
        raise ModelSpecError(f"{path!r}: no *.safetensors files")
    return files


def _base_digest(path: str, cache_dir: str | None) -> hashlib._Hash:
    h = hashlib.sha256(b"rubric_jax-evals-weights-v1")
    for f in checkpoint_weight_files(path):
        h.update(file_sha256(f, cache_dir).encode())
    return h


def arrays_digest(tree: Any) -> str:
    """sha256 over a pytree's leaves (path, dtype, shape, bytes), in sorted path order."""
    import jax

    h = hashlib.sha256()
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    for path, x in sorted(leaves, key=lambda e: jax.tree_util.keystr(e[0])):
        a = np.asarray(x)
        h.update(jax.tree_util.keystr(path).encode())
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Loading


class LoadedMember:
    """A member spec bound to weights: `fingerprint` (cheap: file hashes, adapter tensors) and a lazily loaded
    `model` / `tokenizer` (merged: LoRA folded into the kernels). Generation that is fully cached never loads."""

    def __init__(self, spec: MemberSpec, cache_dir: str | None = None):
        self.spec = spec
        self.cache_dir = cache_dir
        self._fp: str | None = None
        self._model = None
        self._tokenizer = None
        self._lora = None  # workdir: restored LoRA (or full-parameter) pure dict; peft: tensors
        self._finetune = None  # workdir: "lora" | "full"
        self._step = None

    # ---- fingerprint ----
    @property
    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = self._fingerprint()
        return self._fp

    def _fingerprint(self) -> str:
        s = self.spec
        if s.kind in ("embedded", "hf", "gguf"):
            h = _base_digest(s.path, self.cache_dir)
        elif s.kind == "peft":
            h = _base_digest(s.base, self.cache_dir)
            h.update(file_sha256(os.path.join(s.path, "adapter_model.safetensors"), self.cache_dir).encode())
            with open(os.path.join(s.path, "adapter_config.json")) as f:
                acfg = json.load(f)
            h.update(json.dumps({k: acfg.get(k) for k in ("r", "lora_alpha", "target_modules")},
                                sort_keys=True).encode())
        elif s.kind == "workdir":
            from rubric_jax.rl.workdir import base_model_name, run_config

            cfg = run_config(s.path)
            h = _base_digest(base_model_name(cfg), self.cache_dir)
            trained, _ = self._trained()
            # digested as the trainer's checkpoints store the adapters (each array under "value"), so
            # fingerprints, and the caches keyed on them, match those taken before rubric_jax.rl.workdir
            h.update(arrays_digest(_as_stored(trained)).encode())
            if self._finetune == "full":  # the arrays are the whole model: no adapter settings apply
                h.update(b"finetune=full")
            else:
                lc = cfg.get("lora", {})
                h.update(json.dumps({k: lc.get(k) for k in ("rank", "alpha", "targets")}, sort_keys=True).encode())
            h.update(str(cfg.get("dtype", "float32")).encode())
        else:  # pragma: no cover
            raise ModelSpecError(f"unknown kind {s.kind!r}")
        return h.hexdigest()

    def _trained(self):
        """(the workdir's latest trained arrays as a pure dict: LoRA adapters, or all parameters when
        `_finetune` is "full"; its step), read once."""
        if self._lora is None:
            from rubric_jax.rl.workdir import latest_trained

            try:
                self._finetune, self._lora, self._step = latest_trained(self.spec.path)
            except FileNotFoundError as e:
                raise ModelSpecError(str(e)) from e
        return self._lora, self._step

    # ---- loading ----
    @property
    def model(self):
        if self._model is None:
            self._load()
        return self._model

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._load()
        return self._tokenizer

    def _load(self):
        import jax.numpy as jnp

        from rubric_jax.models.loading import load_model
        from rubric_jax.models.tokenizer import load_tokenizer

        s = self.spec
        if s.kind in ("embedded", "hf", "gguf"):
            self._model, self._tokenizer = load_model(s.path), load_tokenizer(s.path)
        elif s.kind == "peft":
            model = load_model(s.base)
            self._model = apply_peft_adapter(model, s.path)
            tok_dir = s.path if os.path.exists(os.path.join(s.path, "tokenizer.json")) else s.base
            self._tokenizer = load_tokenizer(tok_dir)
        elif s.kind == "workdir":
            from rubric_jax.rl.workdir import (apply_trained_lora, base_model_name, run_config,
                                               trained_params_model)

            cfg = run_config(s.path)
            base = base_model_name(cfg)
            trained, step = self._trained()
            try:
                if self._finetune == "full":
                    self._model = trained_params_model(cfg, trained)
                else:
                    model = load_model(base, dtype=jnp.dtype(cfg.get("dtype") or "float32"))
                    self._model = apply_trained_lora(model, cfg, trained)
            except ValueError as e:
                raise ModelSpecError(f"{s.path!r}: {e}") from e
            self._tokenizer = load_tokenizer(cfg.get("tokenizer") or base)
            if self._finetune == "full":
                log.info("%s: full parameters of step %d (architecture of %s)", s.path, step, base)
            else:
                log.info("%s: base %s + LoRA step %d (merged)", s.path, base, step)

    def describe(self) -> str:
        return f"{self.spec.label} [{self.spec.kind}] {self.fingerprint[:12]}"


def _as_stored(tree):
    """{..., leaf: array} -> {..., leaf: {"value": array}}: the nesting of a restored LoRA checkpoint."""
    if isinstance(tree, dict):
        return {k: _as_stored(v) for k, v in tree.items()}
    return {"value": tree}


def apply_peft_adapter(model, adapter_dir: str):
    """Loads a PEFT LoRA adapter (as `rubric_jax.models.export.export_peft` writes it) onto `model`, merged."""
    import jax.numpy as jnp
    from safetensors.numpy import load_file

    from rubric_jax.models.lora import ATTN_TARGETS, LoRAConfig, apply_lora, lora_modules, merge_lora

    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        acfg = json.load(f)
    tensors = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    rank = int(acfg["r"])
    alpha = float(acfg.get("lora_alpha", rank))
    targets = acfg.get("target_modules") or []
    if isinstance(targets, str):
        raise ModelSpecError(f"{adapter_dir}: target_modules as a regex is not supported")
    apply_lora(model, LoRAConfig(rank=rank, alpha=alpha, targets=tuple(sorted(targets))))
    nl = model.cfg.num_layers
    for proj, mod in lora_modules(model):
        parent = "self_attn" if proj in ATTN_TARGETS else "mlp"
        a = np.zeros(mod.lora_a.get_value().shape, np.float32)
        b = np.zeros(mod.lora_b.get_value().shape, np.float32)
        for li in range(nl):
            prefix = f"base_model.model.model.layers.{li}.{parent}.{proj}"
            ka, kb = f"{prefix}.lora_A.weight", f"{prefix}.lora_B.weight"
            if ka not in tensors or kb not in tensors:
                continue  # layer not adapted (layers_to_transform): zero delta
            a[li] = tensors[ka].astype(np.float32).T.reshape(a.shape[1:])
            b[li] = tensors[kb].astype(np.float32).T.reshape(b.shape[1:])
        mod.lora_a.set_value(jnp.asarray(a))
        mod.lora_b.set_value(jnp.asarray(b))
    merge_lora(model)
    return model


def load_contestants(contestants: list[Contestant], cache_dir: str | None = None, *,
                     announce: bool = False) -> dict[str, list[LoadedMember]]:
    """name -> its members as LoadedMember (shuffled members share the underlying member object); announce:
    print one line per member saying what was loaded (the CLIs do, so a wrong path shows before long work)."""
    plain: dict[MemberSpec, LoadedMember] = {}
    out = {}
    for c in contestants:
        ms = []
        for m in c.members:
            key = dataclasses.replace(m, shuffled=False)
            if key not in plain:
                plain[key] = LoadedMember(key, cache_dir)
            ms.append(ShuffledMember(plain[key]) if m.shuffled else plain[key])
        out[c.name] = ms
        if announce:
            for m in ms:
                print(f"model {c.name}: {m.describe()}", flush=True)
    return out


class ShuffledMember:
    """The answers of `inner` with their words shuffled (see generate.shuffle_words)."""

    def __init__(self, inner: LoadedMember):
        self.inner = inner
        self.spec = dataclasses.replace(inner.spec, shuffled=True)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(b"shuffled:" + self.inner.fingerprint.encode()).hexdigest()

    def describe(self) -> str:
        return f"{self.spec.label} [shuffled {self.spec.kind}] {self.fingerprint[:12]}"
