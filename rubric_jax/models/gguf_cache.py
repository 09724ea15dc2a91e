"""A converted copy of each GGUF checkpoint, written on its first load and read instead of it afterwards.

Reading a GGUF file is slow for a small model: the `gguf` package parses every metadata field eagerly (the
49k-entry vocabulary and merge list of the embedded SmolLM2 take about 5 s per open), dequantises every
tensor in numpy, and transformers rebuilds the tokenizer from that metadata (about 8 s more). A job that
loads the policy, its frozen judge and its tokenizer paid that three times, and every evaluation or serving
process again. The first load now writes what it read as a plain checkpoint directory:

    <cache>/<file stem>-<key>/config.json          the ModelConfig, as the exporter writes it
                              model.safetensors    float32 tensors under their Hugging Face names
                              tokenizer.json ...   the tokenizer transformers built from the GGUF (if any)
                              source.json          the GGUF file it came from (path, size, mtime, name)

and later loads read that directory through the safetensors path. The tensors are the dequantised values
the GGUF path would produce, bit for bit, so a model loaded either way is the same model.

The cache is `$RUBRIC_JAX_MODEL_CACHE` (`none` turns it off), else ~/.cache/rubric_jax/models. The key
covers the file's absolute path, size and modification time, so a changed file is converted again. A
directory appears only whole (written beside it, then renamed), so a crash or a second process converting
the same file at the same time never leaves a half-written copy that is read later. When the cache cannot
be written (read-only home, full disk), the GGUF file is read directly and a warning says why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile

log = logging.getLogger(__name__)

CACHE_ENV = "RUBRIC_JAX_MODEL_CACHE"
FORMAT = 1  # bump when the converted layout changes: old copies are then ignored
SOURCE = "source.json"


def cache_root() -> str | None:
    """The directory converted copies live in; None when `$RUBRIC_JAX_MODEL_CACHE` is `none`."""
    value = os.environ.get(CACHE_ENV, "").strip()
    if value.lower() in ("none", "off"):
        return None
    if value:
        return os.path.abspath(os.path.expanduser(value))
    return os.path.join(os.path.expanduser("~"), ".cache", "rubric_jax", "models")


def copy_dir(gguf_path: str, root: str) -> str:
    """Where the converted copy of `gguf_path` lives under `root` (whether or not it exists yet)."""
    st = os.stat(gguf_path)
    ident = f"{FORMAT}:{os.path.abspath(gguf_path)}:{st.st_size}:{st.st_mtime_ns}"
    stem = os.path.basename(gguf_path)[: -len(".gguf")] if gguf_path.endswith(".gguf") else "model"
    return os.path.join(root, f"{stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}")


def cached(gguf_path: str) -> str | None:
    """The finished converted copy of `gguf_path`, or None if there is none (nothing is written)."""
    root = cache_root()
    if root is None:
        return None
    d = copy_dir(gguf_path, root)
    return d if os.path.isfile(os.path.join(d, SOURCE)) else None


def converted(gguf_path: str) -> str | None:
    """The converted copy of `gguf_path`, written now if missing; None when the cache is off or unwritable.

    A GGUF file that cannot be read raises the reader's error (CheckpointFileError naming the file), as a
    direct load would.
    """
    root = cache_root()
    if root is None:
        return None
    return cached(gguf_path) or _materialise(gguf_path, root, copy_dir(gguf_path, root), _write_copy)


def tokenizer_dir(gguf_path: str) -> str | None:
    """A directory with the tokenizer of `gguf_path` (tokenizer.json and its configs): the converted copy when
    there is one, else a tokenizer-only copy written now, without reading or converting the tensors (a job
    that only tokenizes, such as a data check, then does not pay for the model). None when the cache is off
    or unwritable, or when the file carries no tokenizer."""
    root = cache_root()
    if root is None:
        return None
    done = cached(gguf_path)
    if done:
        return done if _has_tokenizer(done) else None
    target = copy_dir(gguf_path, root) + "-tokenizer"
    done = target if os.path.isfile(os.path.join(target, SOURCE)) else _materialise(
        gguf_path, root, target, _write_tokenizer_copy)
    return done if done and _has_tokenizer(done) else None


def _has_tokenizer(copy: str) -> bool:
    return os.path.isfile(os.path.join(copy, "tokenizer.json"))


def _materialise(gguf_path: str, root: str, target: str, write) -> str | None:
    """Runs write(gguf_path, tmp) in a fresh directory under `root` and renames it to `target`: the copy
    appears whole or not at all. None (and a warning) when the cache cannot be written."""
    try:
        os.makedirs(root, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=root, prefix=".partial-")
    except OSError as e:
        log.warning("model cache %s is not writable (%s); reading %s directly", root, e, gguf_path)
        return None
    try:
        write(gguf_path, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.isfile(os.path.join(target, SOURCE)):  # not a finished copy of another process
                raise
    except OSError as e:
        log.warning("could not write the converted copy of %s in %s (%s); reading the GGUF file directly",
                    gguf_path, root, e)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after a rename; a partial copy after a failure
    log.info("converted %s once into %s; later loads read that copy", gguf_path, target)
    return target


def source_name(copy: str) -> str:
    """The model name the GGUF file carried (general.name), which the converted config.json cannot hold."""
    with open(os.path.join(copy, SOURCE), encoding="utf-8") as f:
        return json.load(f)["name"]


def _write_copy(gguf_path: str, out: str) -> None:
    from safetensors.numpy import save_file

    from rubric_jax.models.export import hf_config_dict
    from rubric_jax.models.tensor_files import gguf_tensors

    reader, cfg, names, get = gguf_tensors(gguf_path)
    save_file({name: get(name) for name in names}, os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf_config_dict(cfg, dtype="float32"), f, indent=1)
    tokenizer = _gguf_tokenizer(gguf_path) if "tokenizer.ggml.tokens" in reader.fields else None
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    _write_source(gguf_path, out, cfg.name, tokenizer is not None)


def _write_tokenizer_copy(gguf_path: str, out: str) -> None:
    """The tokenizer part of `_write_copy` alone (transformers reads the metadata, not the tensors)."""
    try:
        tokenizer = _gguf_tokenizer(gguf_path)
    except Exception as e:  # no tokenizer in the metadata, or one transformers cannot rebuild
        log.warning("no tokenizer could be read from %s (%s)", gguf_path, e)
        tokenizer = None
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    _write_source(gguf_path, out, None, tokenizer is not None)


def _write_source(gguf_path: str, out: str, name: str | None, tokenizer: bool) -> None:
    st = os.stat(gguf_path)
    # written last: its presence marks a finished copy
    with open(os.path.join(out, SOURCE), "w", encoding="utf-8") as f:
        json.dump({"gguf": os.path.abspath(gguf_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                   "name": name, "format": FORMAT, "tokenizer": tokenizer}, f, indent=1)


def _gguf_tokenizer(gguf_path: str):
    """transformers' tokenizer rebuilt from the GGUF metadata (its vocabulary, merges and chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                         gguf_file=os.path.basename(gguf_path))


__all__ = ["CACHE_ENV", "cache_root", "cached", "converted", "copy_dir", "source_name", "tokenizer_dir"]
