"""docs/config_checks.md is the list of config values the command refuses before anything loads: every row's flags,
parsed by the command's own flag parser, fail with an error naming its field and with no model, tokenizer or
workdir touched; and every field the checking code looks at has a row there."""

import os
import re

import pytest
from absl import flags
from ml_collections import config_flags

import rubric_jax.main as main_mod
from rubric_jax.errors import UserError
from rubric_jax.rl import setup as setup_mod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "config_checks.md")
ROW = re.compile(r"^\| `(config\.[a-z_.]+)` \| `([^`]*)` \| ([a-z_0-9]+) \| (.+) \|$")


def doc_rows() -> list[tuple[str, list[str], str]]:
    with open(DOC, encoding="utf-8") as f:
        rows = [ROW.match(line.rstrip("\n")) for line in f]
    return [(m[1], m[2].split(), m[3]) for m in rows if m]


ROWS = doc_rows()


def parse_flags(config_name: str, flag_args: list[str]):
    """The config `python -m rubric_jax.main --config=configs/<name>.py:tiny <flags>` runs (absl, locked)."""
    argv = ["main", f"--config={os.path.join(ROOT, 'configs', config_name + '.py')}:tiny", *flag_args]
    fv = flags.FlagValues()
    # the override flags (--config.x.y=v) are found in the argv given at definition, as the command's are
    config_flags.DEFINE_config_file("config", None, "", flag_values=fv, lock_config=True, sys_argv=argv)
    fv(argv)
    return fv.config


def test_the_doc_lists_rows():
    assert len(ROWS) >= 80, f"{DOC}: only {len(ROWS)} rows parsed; is the table's format intact?"


@pytest.mark.parametrize("named,flag_args,config_name", ROWS, ids=[" ".join(r[1]) + f" ({r[2]})" for r in ROWS])
def test_each_documented_refusal_fires_before_anything_loads(named, flag_args, config_name, tmp_path, monkeypatch):
    config = parse_flags(config_name, flag_args)

    def no_load(*a, **k):
        raise AssertionError("a model or tokenizer was loaded before the config was refused")

    for name in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(setup_mod, name, no_load)
    workdir = tmp_path / "run"
    with pytest.raises(UserError) as err:
        main_mod.run(config, str(workdir))
    assert str(err.value).startswith(named), f"{flag_args} on {config_name}: {err.value}"
    assert not workdir.exists() or not os.listdir(workdir), "the refused run wrote into its workdir"


def _checked_fields() -> set[str]:
    """The dotted fields the checking code names (preflight, the shared checks' callers in the methods, the sections
    it builds): the literal first argument of every check call, and each field of the integer loop."""
    sources = [os.path.join(ROOT, "rubric_jax", "rl", "preflight.py")]
    sources += [os.path.join(ROOT, "rubric_jax", "methods", n) for n in os.listdir(os.path.join(ROOT, "rubric_jax",
                                                                                                "methods"))
                if n.endswith(".py")]
    call = re.compile(r"\b_?(?:choice|int|integer|num|number|fail|section|checkpoint|rubric_name)\("
                      r"(?:config, )?f?\"([a-z_.{}]+)\"")
    fields = set()
    for path in sources:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        fields |= set(call.findall(text))
        for loop in re.findall(r"for field in \(([^)]*)\):\s*\n\s*_?int(?:eger)?\(config, field", text):
            fields |= set(re.findall(r"\"([a-z_.]+)\"", loop))
        for loop in re.findall(r"for field in \(([^)]*)\):[^\n]*\n(?:[^\n]*\n){0,3}?[^\n]*fail\(f\"rare\.\{field\}", text):
            fields |= {f"rare.{x}" for x in re.findall(r"\"([a-z_.]+)\"", loop)}
    return {f for f in fields if "{" not in f}


def test_every_checked_field_has_a_row():
    fields = _checked_fields()
    # the parse found the checks (a broken pattern would pass the test below with an empty set)
    assert {"group_size", "loss.aggregation", "judge.comparison", "reward", "rare.level", "model"} <= fields, fields
    documented = {named.removeprefix("config.") for named, _, _ in ROWS}
    documented |= {f for _, flag_args, _ in ROWS for f in (a.removeprefix("--config.").split("=")[0]
                                                            for a in flag_args)}
    missing = sorted(fields - documented)
    assert not missing, f"checked but not in {os.path.relpath(DOC, ROOT)}: {missing}"
