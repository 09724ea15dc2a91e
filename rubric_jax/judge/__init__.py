"""Judging rollouts on rubric criteria: the names a user needs, each documented where it is defined.

    Verdicts                  the protocol every judge implements (verdicts.py): pairwise_batch (listwise through
                              comparison="listwise"), pointwise_batch, verify_batch
    Judge, JudgeConfig        the local backend: a frozen model through the compiled forward (engine.py, common.py)
    RemoteJudge               the remote backend: a chat model behind an OpenAI-compatible endpoint (remote.py)
    PairwiseResult, PointwiseResult, VerifyResult    what the three methods return
    PromptConfig              the judge prompt's settings (prompts.py), a field of JudgeConfig
    pairwise, pointwise       one group judged in one call on a loaded model: Judge(model, tokenizer).pairwise(...)

Everything else in this package is the engine's inside and may change; docs/method.md section 2 gives the math.
"""

from rubric_jax.judge.common import JudgeConfig, PairwiseResult, PointwiseResult
from rubric_jax.judge.engine import Judge, pairwise, pointwise
from rubric_jax.judge.prompts import PromptConfig
from rubric_jax.judge.remote import RemoteJudge
from rubric_jax.judge.verdicts import Verdicts
from rubric_jax.judge.verify import VerifyResult

__all__ = ["Judge", "JudgeConfig", "PairwiseResult", "PointwiseResult", "PromptConfig", "RemoteJudge", "Verdicts",
           "VerifyResult", "pairwise", "pointwise"]
