"""Studies of the method: each reads or reruns what text2grad.py builds, and nothing at the top
level imports them. Each is a command, run from the repository's root:

    python -m experiments.report           a run's summary: intervals, paired differences, report.html
    python -m experiments.credit_landing   where one PPO update moves log pi, on a finished run
    python -m experiments.sweep            the K sweep: K independent flaws per response
    python -m experiments.value_heads      the value head under the authors' settings and ours
    python -m experiments.lookup           what makes qa's look-up learnable: canon layers, pretraining
    python -m experiments.critique_check   the CoT reward model: the fact it states, the verdict after it
    python -m experiments.figures          the README's figures from the runs' results
    python -m experiments.bench            the loss path, generation and one update, timed

stats.py (intervals, the bootstrap, reading curves), summary.py (a run's results.json summarised)
and terminal.py (tables) are what the commands share.
"""
