"""Reward methods as plugins (rubric_jax.rl.plugins, the built-ins in rubric_jax.methods): the trainer names none
of them, configs find theirs by name, and the worked examples of docs/architecture.md (a new method, a new reward
term: one module plus one config file each) train once installed the way a user's package is, through an entry
point."""

import contextlib
import importlib.util
import os
import re
import sys

import numpy as np
import pytest

from rubric_jax.rl import plugins, preflight, trainer
from rubric_jax.rl.plugins import METHODS, TERMS

plugins.load_plugins()  # the built-in methods and terms registered, as the first lookup does

from conftest import ROOT, load_config  # noqa: E402


def test_the_trainer_names_no_method_and_no_reward_term():
    """The loop calls the method's protocol only: no method's, term's or schedule's name appears in its source
    (code, strings or comments)."""
    with open(os.path.join(ROOT, "rubric_jax", "rl", "trainer.py"), encoding="utf-8") as f:
        source = f.read()
    names = [*METHODS, *TERMS, "rare", "rlmr", "pacing", "curriculum", "rubric_store", "verifier"]
    named = [n for n in names if re.search(rf"\b{re.escape(n)}\b", source, re.IGNORECASE)]
    assert named == []
    # the check can fail: the trainer's module name itself is found the same way
    assert re.search(r"\btrainer\b", source, re.IGNORECASE)


@pytest.mark.parametrize("name,method", [("rcrl", "rubric"), ("absolute_rar", "rubric"), ("dropout_rar", "rubric"),
                                         ("rcrl_auto_pacing", "rubric"), ("rcrl_listwise", "rubric"),
                                         ("instance_rubric", "per_prompt"), ("rare", "rare"), ("rler", "rare"),
                                         ("rlmr", "rlmr"), ("verifier_only", "rlmr"), ("learn_ifeval", "rlmr")])
def test_each_config_finds_its_method_by_name(name, method):
    cfg = load_config(name, "tiny")
    assert plugins.method_name(cfg) == method
    assert isinstance(plugins.get(method)(cfg, None, [], None), METHODS[method])


def test_an_unknown_method_fails_the_config_check_naming_the_registered_ones():
    cfg = load_config("rcrl", "tiny")
    cfg.reward.method = "pariwise"
    with pytest.raises(preflight.ConfigError, match=r"config\.reward\.method='pariwise'.*'rare', 'rlmr'.*pairwise"):
        preflight.check(cfg)
    with pytest.raises(ValueError, match="no reward method 'nope'"):
        plugins.get("nope")


def test_two_methods_cannot_share_a_name():
    with pytest.raises(ValueError, match="two reward methods are registered as 'rare'"):
        plugins.register("rare")(type("Other", (plugins.Method,), {}))
    assert METHODS["rare"].__name__ == "RareMethod"


def test_what_a_method_returns_is_checked_naming_it():
    from rubric_jax.rl.plugins import RewardOut, checked

    ok = RewardOut(np.zeros((2, 4), np.float32), {}, np.zeros(2, bool), {"violate": np.zeros((2, 4), bool)})
    assert checked(ok, "m", 2, 4) is ok
    with pytest.raises(ValueError, match=r"reward method 'm' returned rewards of shape \(8,\) for 2 groups of 4"):
        checked(RewardOut(np.zeros(8, np.float32), {}), "m", 2, 4)
    with pytest.raises(ValueError, match="dtype <U1"):
        checked(RewardOut(np.full((2, 4), "x"), {}), "m", 2, 4)
    with pytest.raises(ValueError, match=r"drop of shape \(4,\)"):
        checked(RewardOut(np.zeros((2, 4)), {}, np.zeros(4, bool)), "m", 2, 4)
    with pytest.raises(ValueError, match=r"picked\['v'\] has shape \(3, 4\)"):
        checked(RewardOut(np.zeros((2, 4)), {}, None, {"v": np.zeros((3, 4))}), "m", 2, 4)


def _doc_blocks(module_marker, config_marker):
    """The worked example's two python blocks in docs/architecture.md: (module, config file)."""
    from doc_blocks import python_block

    return python_block(module_marker), python_block(config_marker)


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def _installed(tmp_path, name, source):
    """`source` as the module `name` of a package installed the way pip installs one: the module on sys.path and a
    dist-info folder whose entry_points.txt names it in the group "rubric_jax.plugins". The registry reads the
    installed entry points afresh (`plugins.load_plugins`); on exit what the module registered is removed."""
    site = tmp_path / "site"
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (site / f"{name}.py").write_text(source)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINTS}]\n{name} = {name}\n")
    before, methods_before, terms_before = list(plugins._loaded), dict(METHODS), dict(TERMS)
    sys.path.insert(0, str(site))
    plugins._loaded.clear()
    try:
        assert name in plugins.load_plugins()
        yield
    finally:
        sys.path.remove(str(site))
        plugins._loaded[:] = before
        for registry, was in ((METHODS, methods_before), (TERMS, terms_before)):
            for key in set(registry) - set(was):
                registry.pop(key)
        sys.modules.pop(name, None)


def test_a_plugin_that_fails_to_import_is_named(tmp_path):
    with pytest.raises(RuntimeError, match=r"entry point 'broken_plugin' \(broken_plugin\) failed to import: "
                                           r"ZeroDivisionError"):
        with _installed(tmp_path, "broken_plugin", "1 / 0\n"):
            pass
    assert plugins.method_choices() == ("pairwise", "absolute", "rare", "rlmr")  # the built-ins as before


def test_every_module_of_the_methods_package_is_registered_by_the_package_scan():
    """A module dropped into rubric_jax/methods/ needs no import line anywhere: the package imports them all."""
    import pkgutil

    import rubric_jax.methods as builtin

    names = [m.name for m in pkgutil.iter_modules(builtin.__path__)]
    assert {"rare", "rlmr", "per_prompt", "rcrl", "terms"} <= set(names)
    assert all(f"rubric_jax.methods.{n}" in sys.modules for n in names)
    with open(os.path.join(ROOT, "rubric_jax", "methods", "__init__.py"), encoding="utf-8") as f:
        assert not any(re.search(rf"\b{n}\b", line) for line in f if "import" in line for n in names)


@pytest.mark.slow
def test_the_worked_example_trains_a_step(tiny_qwen3, tmp_path):
    """The documented module and config, as written, on the tiny random Qwen3: one step, the method's reward
    (mean words / 40 while every answer is under 40 words) and its own metric logged, the judge never asked.
    (About 10 s: one sampler and one update program, shared with the suite's other tiny runs.)"""
    module, config_file = _doc_blocks('@register("word_target")', "# configs/word_target.py")
    (tmp_path / "word_target_cfg.py").write_text(config_file)
    try:
        with _installed(tmp_path, "word_target_example", module):
            assert "word_target" in plugins.method_choices()
            cfg = _import(str(tmp_path / "word_target_cfg.py"), "word_target_example_cfg").get_config("tiny")
            cfg.model, cfg.steps, cfg.max_completion_len, cfg.tensorboard = tiny_qwen3[0], 1, 8, False
            cfg.prompt_width = "max"  # the suite's other tiny runs' programs (test_trainer._tiny_run_config)
            preflight.check(cfg)
            (m,) = trainer.train(cfg, str(tmp_path / "run"))
        assert "word_target" not in plugins.method_choices()  # uninstalled again
    finally:
        sys.modules.pop("word_target_example_cfg", None)
    words = m["word_target/words"]
    assert 0 <= words <= 8  # at most 8 tokens each
    np.testing.assert_allclose(m["reward/mean"], words / 40, rtol=1e-5)
    assert m["reward/judge_mean"] == m["reward/mean"] and "active_criteria" not in m
    assert m["time/judge_padded_tokens"] == 0.0  # nothing was judged


@pytest.mark.slow
def test_the_worked_reward_term_adds_its_standardised_bonus(tiny_qwen3, tmp_path):
    """The documented reward term (a function) and its config file, as written: one RcRL step on the tiny random
    Qwen3 logs bonus/brevity, the mean of minus the completions' lengths, and the standardised bonus adds nothing
    to the mean reward (it is zero-mean in each group). (About 10 s, the suite's shared tiny programs.)"""
    module, config_file = _doc_blocks('@term("brevity")', "# configs/rcrl_brevity.py")
    (tmp_path / "brevity_cfg.py").write_text(config_file)
    try:
        with _installed(tmp_path, "brevity_example", module):
            cfg = _import(str(tmp_path / "brevity_cfg.py"), "brevity_example_cfg").get_config("tiny")
            cfg.model, cfg.steps, cfg.max_completion_len, cfg.tensorboard = tiny_qwen3[0], 1, 8, False
            cfg.prompt_width = "max"
            preflight.check(cfg)
            (m,) = trainer.train(cfg, str(tmp_path / "run"))
            with pytest.raises(preflight.ConfigError, match=r"config\.reward: unknown setting\(s\) \['brevty_coef'\]"):
                bad = _import(str(tmp_path / "brevity_cfg.py"), "brevity_example_cfg2").get_config("tiny")
                with bad.unlocked():
                    bad.reward.brevty_coef = 0.1  # a term that is not registered
                preflight.check(bad)
        # uninstalled, its own key is unknown too
        with pytest.raises(preflight.ConfigError, match=r"config\.reward: unknown setting\(s\) \['brevity_coef'\]"):
            preflight.check(_import(str(tmp_path / "brevity_cfg.py"), "brevity_example_cfg3").get_config("tiny"))
    finally:
        for name in ("brevity_example_cfg", "brevity_example_cfg2", "brevity_example_cfg3"):
            sys.modules.pop(name, None)
    np.testing.assert_allclose(m["bonus/brevity"], -m["completion_len/mean"], rtol=1e-6)
    np.testing.assert_allclose(m["reward/mean"], m["reward/judge_mean"], atol=1e-6)


def test_each_method_owns_its_config_sections_and_an_installed_one_adds_its_own(tmp_path):
    """base_config's pacing, rlmr and rare sections are the methods' own (`Method.config_sections`), and a
    method installed from another package adds its section to every config, typos refused once locked."""
    from rubric_jax.config_base import base_config, finalize

    c = base_config()
    for name, section in (("rubric", "pacing"), ("rlmr", "rlmr"), ("rare", "rare")):
        assert c[section].to_dict() == METHODS[name].config_sections()[section]
    assert finalize(base_config(), "tiny").pacing.prompts == 2  # RcRL's own :tiny shrink (`tiny_sections`)
    source = ("from rubric_jax.methods import Method, register\n\n\n@register('echo')\nclass Echo(Method):\n"
              "    @classmethod\n    def config_sections(cls):\n        return {'echo': dict(depth=3)}\n\n"
              "    def reward(self, batch):\n        raise NotImplementedError\n")
    with _installed(tmp_path, "echo_method", source):
        c = finalize(base_config(), "tiny")
        assert c.echo.depth == 3 and "echo" in plugins.method_choices()
        with pytest.raises(AttributeError):
            c.echo.detph = 4
    assert "echo" not in base_config()
