"""The lab: studies of the method. Each reads or reruns what the top-level files build, and nothing at
the top level imports them. Each is a command, run from the repository's root:

    python -m experiments.protocol         the full experiment: seeds, the lambda grid, resume, results.json
    python -m experiments.report           a run's summary: intervals, paired differences, report.html
    python -m experiments.sweep            the K sweep: K independent flaws per response (--ablation: the guards)
    python -m experiments.value_heads      the value head under the authors' settings and ours
    python -m experiments.lookup           what makes qa's look-up learnable: canon layers, pretraining
    python -m experiments.critique_check   the CoT reward model: the fact it states, the verdict after it
    python -m experiments.figures          the README's figures from the runs' results
    python -m experiments.convert          the authors' and LLM annotators' stored annotations -> ours
    python -m experiments.bench            the loss path, generation and one update, timed
    python -m experiments.diff_results     two runs' results.json compared leaf by leaf

runstate.py (errors, atomic writes, progress.json), checkpoint.py, measures.py, ppo_runs.py (the PPO stage), run_folder.py, showcase.py,
stats.py, summary.py and terminal.py are what the commands share. LOG.md is the experiments' history.
"""
import os

# Before torch loads MKL: its conditional numerical reproducibility, so that a stage resumed in a new
# process computes what an uninterrupted run did (otherwise MKL may choose a code path by where the
# loaded weights happen to sit in memory, and round a float32 product differently).
os.environ.setdefault("MKL_CBWR", "AUTO")
