"""Your functions. Each stub names its exercise (exercises/README.md); replace its body.

    python -m pytest exercises                  # the checks, on these functions
    python -m pytest exercises -k e3            # one exercise's checks
    python -m exercises                         # the first look with the ones you have written

Each function has the signature of the project's function of the same name (the file named in
its docstring), and the checks are the project's own tests, run on yours. torch is all you need;
you may call any project function that is not one of the exercises.
"""
import torch  # noqa: F401  (you will want it)


def find_span(text, phrase):
    """E1 (align.py). Character range (start, end) of phrase in text, end exclusive, or None.
    An empty or whitespace-only phrase (or text) gives None.
    Tier 1: the phrase exactly as given, spaces included. Tier 2: case- and whitespace-
    insensitive, the phrase's words joined by any run of whitespace ("the  Sum" matches
    "THE sum"); the range is in the original text. In each tier a match on word boundaries
    beats an earlier one inside a word ("24" in "240, not 24" is the standalone 24); the check
    applies only at an end of the phrase that is itself a word character (a letter, digit
    or _), so ">=" has no boundary to respect. Otherwise the leftmost match wins.
    Extension: tier 3, when both miss: return align._fuzzy_span(text, phrase.split())."""
    raise NotImplementedError("E1: write find_span in exercises/student.py (handout, E1)")


def span_rewards(offsets, spans, text):
    """E1 (align.py). delta per token from character spans.
    offsets: one (start, end) per token, as the tokenizer reports it (a token's range may begin
    with the space before its word). spans: (start, end, value) triples, value +1 or -1.
    A token takes a span's value if any of its non-whitespace characters lies in the span;
    whitespace-only or empty tokens get 0.0; where spans overlap, the lowest value wins (blame).
    Returns a list of floats, one per token."""
    raise NotImplementedError("E1: write span_rewards in exercises/student.py (handout, E1)")


def bound_praise(delta, tokens):
    """E2 (guards.py). One response's delta (list of -1, 0, +1) and token ids -> scores (floats).
    A praised span is a maximal run of positive deltas; it shares +1 over its tokens (a span of
    3 tokens: 1/3 each). A span whose token ids repeat an earlier praised span of the same
    response pays 0. Blame stays -1 per token; 0 stays 0."""
    raise NotImplementedError("E2: write bound_praise in exercises/student.py (handout, E2)")


def final_scores(values, mask):
    """E3 (ppo.py). Standard RLHF's placement: values (B,), a tensor or a list of floats ->
    scores (B, N), a float tensor on mask's device with each value on its response's last real
    token (the last 1 of its mask row) and 0 everywhere else, padding included.
    mask: float (B, N), 1 on response tokens. A row with an empty mask gets nothing."""
    raise NotImplementedError("E3: write final_scores in exercises/student.py (handout, E3)")


def token_rewards(scores, logprobs, ref_logprobs, mask, ended, beta, missing_eos_penalty):
    """E3 (ppo.py). r_t = score_t - beta * (log pi(y_t) - log pi_ref(y_t)), and a response that
    never sampled its EOS (ended (B,) bool, False) loses missing_eos_penalty on its last real
    token. All (B, N); zero outside the mask."""
    raise NotImplementedError("E3: write token_rewards in exercises/student.py (handout, E3)")


def compute_advantages(rewards, values, mask, gamma=1.0, lam=0.95):
    """E4 (ppo.py). GAE over the response positions, backwards, the value past a response's end 0:
        td_t = r_t + gamma * V_{t+1} - V_t,    A_t = td_t + gamma * lam * A_{t+1}
    rewards, values, mask (B, N) -> (advantages, returns), returns = advantages + values; both
    zero outside the mask (what lies there, in rewards or values, must not leak in)."""
    raise NotImplementedError("E4: write compute_advantages in exercises/student.py "
                              "(handout, E4)")


def clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values, advantages, returns,
                   clip, value_clip, value_coef, entropy_coef):
    """E5 (loss.py). PPO's objective, every mean over the real tokens (mask == 1):
        rho_t = exp(log pi(y_t) - log pi_old(y_t))
        L_pi  = mean_t max(-A_t rho_t, -A_t clip(rho_t, 1 - clip, 1 + clip))
        V~_t  = V_old_t + clip(V_t - V_old_t, -value_clip, value_clip)
        L_V   = 0.5 mean_t max((V_t - R_t)^2, (V~_t - R_t)^2)
        loss  = L_pi + value_coef L_V - entropy_coef mean_t H_t
    All tensors (B, N); the coefficients are 0-d tensors (value_clip may be inf). Outside the
    mask the inputs may hold large finite values (1e4, say): mask the log-ratio before exp.
    Returns (loss, stats): stats a dict of detached 0-d tensors, each a mean over the real
    tokens: policy_loss, value_loss, entropy, approx_kl ((rho - 1) - log rho), clip_fraction
    (share with |rho - 1| > clip), value_clip_fraction (share with |V - V_old| > value_clip)
    and ratio (rho)."""
    raise NotImplementedError("E5: write clipped_losses in exercises/student.py (handout, E5)")


def group_advantages(scores, mask, group, per="token"):
    """E7 (grpo.py). GRPO's advantages. Rows come in groups of `group` responses to one prompt
    (rows 0..group-1, then the next group); each is compared with its own group only.
      per "token":    every real token's score is a reward; normalise them over the group's
                      tokens, r~ = (r - mean) / std (population std), then A_t = sum_{l >= t} r~_l
                      within the response.
      per "response": R_i = the sum of response i's scores; normalise the group's R, A_t = R~_i
                      on every real token of response i.
    Only real tokens enter a group's statistics per token; per response every response counts
    (an empty one has R = 0). A group whose std is at most 1e-5 * (1 + |mean|) (equal values up
    to float rounding) gets 0, never NaN. A ValueError names any other `per`.
    scores, mask (B, N) -> advantages (B, N), zero outside the mask."""
    raise NotImplementedError("E7: write group_advantages in exercises/student.py (handout, E7)")


def logprob_gap(model, prompts, eos_id, pad_id):
    """E8 (a measurement, no project twin). model: a ppo.PolicyWithValue, or the variant in
    exercises/silent_bug.py. Sample a response to each prompt (token-id lists) with model.gpt
    (generate() in model.py, with_logprobs=True, temperature 1, max_new_tokens 12), score the
    same tokens as PPO's trainer does (ppo.score_responses, model.gpt as the reference) and
    return the largest |sampler's log-prob - trainer's log-prob| over the real response tokens,
    as a float."""
    raise NotImplementedError("E8: write logprob_gap in exercises/student.py (handout, E8)")
