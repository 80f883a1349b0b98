"""The lab: studies of the method. Each reads or reruns what the top-level files build, and nothing at
the top level imports them. Each is a command, run from the repository's root:

    python -m experiments.protocol         the full experiment: seeds, the lambda grid, resume, results.json
    python -m experiments.report           a run's summary: intervals, paired differences, report.html
    python -m experiments.first_looks      the first look over seeds, its record under results/
    python -m experiments.robustness       the first look under 18 PPO settings, each method choosing its own
    python -m experiments.information      what each method is given: rows that hold the information fixed
    python -m experiments.sweep            the K sweep: K independent flaws per response (--ablation: the guards)
    python -m experiments.reward_grid      each reward model's learning rate and steps, chosen on validation
    python -m experiments.revise           the prompt-only baseline on a finished run
    python -m experiments.optimisers       PPO against GRPO on a finished run
    python -m experiments.lookup           what makes qa's look-up learnable: canon layers, pretraining
    python -m experiments.convert          the authors' and LLM annotators' stored annotations -> ours
    python -m experiments.bench            the loss path, generation and one update, timed
    python -m experiments.diff_results     two runs' results.json compared leaf by leaf

Six take --ray: their units as Ray tasks (fanout.py; pip install -r experiments/requirements-ray.txt).
The other modules are what the commands share; LOG.md is the experiments' history.
"""
import os

# Before torch loads MKL: its conditional numerical reproducibility, so that a stage resumed in a new
# process computes what an uninterrupted run did (otherwise MKL may choose a code path by where the
# loaded weights happen to sit in memory, and round a float32 product differently).
os.environ.setdefault("MKL_CBWR", "AUTO")
