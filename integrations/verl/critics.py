"""The critics a SpanRewardManager asks: a prompt and a response -> a critique quoting spans.

verl loads one by reward.custom_reward_function.path and .name; the manager calls it, a plain
function (not a coroutine) run in a worker thread, as
    critic(prompt=..., response=..., ground_truth=..., router=...)
  prompt        the text of the sample's last user message
  response      the response's text, decoded from its sampled bytes (manager.py)
  ground_truth  the dataset's reward_model.ground_truth, or None where verl does not pass it (its
                v1 trainer gives a colocated reward model the prompts and responses only)
  router        "host:port" of verl's router to the colocated reward model's servers
It returns the annotation {"textual_feedback", "good_spans", "poor_spans"} or an annotator's
reply, which data/replies.py reads into it (fences, prose around the JSON, trailing commas):
  facts_critic  the facts task's programmatic critic (data/facts.py), the facts read back from
                the note in the prompt, so that it needs no ground truth
  llm_judge     the colocated reward model itself, asked through the router for that JSON
"""
import json
import re
import urllib.request

from data import Example, facts

# kind -> its sentence as a pattern capturing the value: "It is from (\w+)\."
SENTENCES = {kind: re.compile(re.escape(template).replace(re.escape("{value}"), r"(\w+)"))
             for kind, (template, _, _) in facts.KINDS.items()}

JUDGE = """You annotate a response to a prompt. Reply with one JSON object and nothing else:
{"textual_feedback": "a short critique",
 "good_spans": ["a phrase of the response that is right"],
 "poor_spans": ["a phrase of the response that is wrong"]}
Quote every phrase exactly as it stands in the response, a few words each."""


def facts_critic(prompt, response, ground_truth=None, router=None):
    """data/facts.py's critic on a response to an order note; the note's facts are read from the
    prompt (in the order of facts.KINDS, as the task writes them)."""
    sites = [[kind, found.group(1), facts.KINDS[kind][2]] for kind, sentence in SENTENCES.items()
             if (found := sentence.search(prompt))]
    if not sites:
        raise ValueError(f"no fact of the facts task in the prompt {prompt[:80]!r}")
    return facts.critique(Example(prompt, "", "", facts={"sites": sites}), response)


def llm_judge(prompt, response, ground_truth=None, router=None, timeout=300):
    """The reply of the model verl serves as the colocated reward model (its chat-completions
    endpoint, through the router), shown the prompt, a correct answer when the dataset has one,
    and the response."""
    if router is None:
        raise ValueError("llm_judge needs verl's colocated reward model "
                         "(reward.reward_model.enable=True): it has no router to ask")
    reference = f"\n\nA correct answer:\n{ground_truth}" if ground_truth else ""
    request = {"messages": [{"role": "system", "content": JUDGE},
                            {"role": "user", "content": f"Prompt:\n{prompt}{reference}\n\n"
                                                        f"Response:\n{response}"}],
               "temperature": 0.0, "max_tokens": 1024}
    post = urllib.request.Request(f"http://{router}/v1/chat/completions",
                                  data=json.dumps(request).encode(),
                                  headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(post, timeout=timeout) as answer:
        body = answer.read()
    try:
        return json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):  # an error page, not a chat completion
        raise OSError(f"the router answered no chat completion: {body[:80]!r}") from None
