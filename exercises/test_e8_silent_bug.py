"""E8, a silent bug found by measurement: your logprob_gap on exercises/silent_bug.py."""
import pytest

from exercises import student
from test_silent_bug import (  # noqa: F401
    policy, sampler_gap,
    test_the_trainer_reads_the_log_probs_the_sampler_drew_and_the_suspect_does_not,
    test_the_gap_is_a_float)

HINT = ("E8: sample with generate(..., with_logprobs=True), score the same tokens with "
        "ppo.score_responses, compare the two log-probs where the mask is 1 "
        "(exercises/README.md, E8)")


@pytest.fixture
def logprob_gap(request):
    return student.logprob_gap if request.config.exercises_mode == "student" else sampler_gap
