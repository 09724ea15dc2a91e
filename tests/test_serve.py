"""The OpenAI-compatible server, for real: a `python -m rubric_jax.serve` subprocess on a tiny random Qwen3
checkpoint, driven by the official `openai` client and raw httpx."""

import concurrent.futures
import math
import re

import httpx
import pytest

from serve_fixture import shared_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

MSG = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
MAX_TOKENS = 8  # one compiled sampler shape for the whole module (with temperature 0)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    return shared_server(tmp_path_factory)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0], api_key="unused", max_retries=0, timeout=300)


def test_list_models(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["tiny_qwen3"]


def test_chat_completion_and_logprobs(client):
    r = client.chat.completions.create(model="tiny_qwen3", messages=MSG, max_tokens=MAX_TOKENS, temperature=0,
                                       logprobs=True, top_logprobs=5, seed=1)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert 0 < u.completion_tokens <= MAX_TOKENS and u.prompt_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    content = choice.logprobs.content
    # one entry per generated token (the end-of-turn token excluded)
    assert len(content) == u.completion_tokens - (choice.finish_reason == "stop")
    assert "".join(c.token for c in content) == choice.message.content
    for c in content:
        tops = [t.logprob for t in c.top_logprobs]
        assert len(tops) == 5 and all(math.isfinite(v) and v <= 0 for v in tops)
        assert tops == sorted(tops, reverse=True)
        assert sum(math.exp(v) for v in tops) <= 1 + 1e-4
        # greedy: the sampled token is the most likely one
        assert c.top_logprobs[0].token == c.token and c.logprob == pytest.approx(tops[0], abs=1e-5)
    # greedy decoding is reproducible, and the same request without logprobs gives the same text
    again = client.chat.completions.create(model="tiny_qwen3", messages=MSG, max_tokens=MAX_TOKENS, temperature=0)
    assert again.choices[0].message.content == choice.message.content
    assert again.choices[0].logprobs is None


def test_concurrent_requests_are_batched(client, server):
    before = httpx.get(f"{server[0]}/stats").json()
    prompts = [f"Count to {i}." for i in range(4)]

    def ask(p):
        return client.chat.completions.create(model="tiny_qwen3", messages=[{"role": "user", "content": p}],
                                              max_tokens=MAX_TOKENS, temperature=0)

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        results = list(ex.map(ask, prompts))
    assert all(r.choices[0].message.content and r.usage.completion_tokens > 0 for r in results)
    after = httpx.get(f"{server[0]}/stats").json()
    assert after["requests"] - before["requests"] == 4
    assert after["batches"] - before["batches"] < 4  # at least two shared a batch
    assert after["max_batch_rows"] >= 2
    log = open(server[1]).read()
    assert re.search(r"batch: [2-4] rows", log), log[-2000:]


@pytest.mark.parametrize("payload, fragment", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"model": "x"}', "messages"),
    (b'{"messages": "hello"}', "messages"),
    (b'{"messages": [{"role": "wizard", "content": "hi"}]}', "role"),
    (b'{"messages": [{"role": "user", "content": 5}]}', "content"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}', "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "8"}', "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "n": 2}', "n=1"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}', "temperature"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "'temperature' must be a finite"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}', "'top_p' must be a finite"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 50, "logprobs": true}', "top_logprobs"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}', "context"),
])
def test_malformed_requests_get_400(server, payload, fragment):
    r = httpx.post(f"{server[0]}/chat/completions", content=payload, headers={"Content-Type": "application/json"},
                   timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert fragment in err["message"] and err["type"] == "invalid_request_error"


def test_too_long_prompt_and_then_a_normal_request(client, server):
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model="tiny_qwen3", max_tokens=MAX_TOKENS,
                                       messages=[{"role": "user", "content": "word " * 600}])
    r = client.chat.completions.create(model="tiny_qwen3", messages=MSG, max_tokens=MAX_TOKENS, temperature=0)
    assert r.choices[0].message.content
    assert server[2].poll() is None


def test_streaming(client):
    full = client.chat.completions.create(model="tiny_qwen3", messages=MSG, max_tokens=MAX_TOKENS, temperature=0)
    stream = client.chat.completions.create(model="tiny_qwen3", messages=MSG, max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == full.choices[0].finish_reason
    assert chunks[-1].usage.total_tokens == full.usage.total_tokens


def test_a_training_workdir_serves_its_base_with_the_latest_lora_merged(server, tmp_path):
    """load_for_serving(workdir) == the LoRA policy saved in the workdir's latest checkpoint (in-process)."""
    import json
    import os

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from rubric_jax import load_model
    from rubric_jax.models.lora import LoRAConfig, apply_lora
    from rubric_jax.rl.checkpoint import Checkpointer
    from rubric_jax.serve import load_for_serving

    base_dir = os.path.join(os.path.dirname(server[1]), "tiny_qwen3")
    lcfg = {"rank": 4, "alpha": 8.0, "dropout": 0.05, "targets": ["q_proj", "v_proj", "up_proj"]}
    json.dump({"model": base_dir, "tokenizer": "", "dtype": "float32", "lora": lcfg},
              open(tmp_path / "config.json", "w"))
    policy = apply_lora(load_model(base_dir), LoRAConfig(rank=4, alpha=8.0, targets=tuple(lcfg["targets"])))
    lora = nnx.state(policy, nnx.LoRAParam)
    lora = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(0), x.shape, x.dtype), lora)
    nnx.update(policy, lora)
    with Checkpointer(str(tmp_path)) as ck:
        ck.save(1, {"lora": jax.tree.map(jnp.zeros_like, lora), "opt_state": {}}, {"step": 1}, force=True)
        ck.save(2, {"lora": lora, "opt_state": {"count": jnp.zeros(())}}, {"step": 2}, force=True)
    served, tok = load_for_serving(str(tmp_path))
    for parent, name in [("self_attn", "q_proj"), ("self_attn", "v_proj"), ("mlp", "up_proj"), ("self_attn", "k_proj")]:
        got = getattr(getattr(served.layers, parent), name)
        assert not hasattr(got, "lora_a")  # merged: plain projections again
        mod = getattr(getattr(policy.layers, parent), name)
        want = (mod.base.kernel.get_value() + mod.delta_kernel()) if hasattr(mod, "lora_a") else mod.kernel.get_value()
        assert float(jnp.abs(got.kernel.get_value() - want).max()) < 1e-5
        if hasattr(mod, "lora_a"):
            assert float(jnp.abs(mod.delta_kernel()).max()) > 1e-3  # the adapters of step 2, not step 1's zeros
    assert tok.eos_ids
