"""The run sizes the lab's protocol picks with --preset, apart so that every study reading a run
folder (experiments/run_folder.py) can know them without importing the protocol that writes it."""

# Sizes a run may pick with --preset: "default" is the experiment's (RESULTS.md); "small" a quick
# look in 3 minutes on 2 CPU cores; "tiny" the test suite's end-to-end run (every stage, seconds;
# its numbers mean nothing). The fields are text2grad.Config's, and: model, the GPT's; sft_eval_every,
# steps between points of the SFT and pretraining learning curve; lambdas, the GAE lambda grid each
# method chooses from on validation (ppo_stage), groups, the group sizes GRPO's runs choose from
# (--advantage grpo), and revise_steps, the revising stage's steps the prompt-only baseline chooses
# from (experiments/revise.py); ppo, PPOConfig fields, with the guards'
# (guards.Guards) and the refresh's (refresh_every, refresh_samples, ...: experiments.refresh.RefreshConfig)
# beside them; choose_by, test_curve and overopt_prompts, set by the K sweep (experiments/sweep.py):
# lambda chosen by the validation curve's last quarter; the test prompts scored at every point; the
# prompts the over-optimisation measurement samples. configs() and ppo_stage(): experiments/ppo_runs.py.
PRESETS = {
    "default": dict(train=4000, annotated=4000, demonstrations=38400, validation=200, test=200, vocab_size=1024,
                    sft_steps=1200, batch_size=32, lr=2e-3, sft_eval_every=200, pretrain_steps=800,
                    model=dict(n_layer=4, n_head=4, n_embd=128),
                    samples_per_prompt=2, reward_steps=400, reward_lr=2e-3,
                    ppo=dict(updates=12, batch_size=64, minibatch_size=32, lr=5e-5), eval_every=3,
                    lambdas=(0.0, 0.5, 0.95), groups=(4, 8, 16), revise_steps=(150, 300, 600)),
    "small": dict(train=1500, annotated=1500, demonstrations=12800, validation=100, test=100, vocab_size=512,
                  sft_steps=400, batch_size=32, lr=3e-3, sft_eval_every=100, pretrain_steps=200,
                  model=dict(n_layer=2, n_head=4, n_embd=96),
                  samples_per_prompt=1, reward_steps=200, reward_lr=2e-3,
                  ppo=dict(updates=8, batch_size=32, minibatch_size=32, lr=3e-5), eval_every=2,
                  lambdas=(0.0, 0.5, 0.95), groups=(4, 8), revise_steps=(100, 200)),
    "tiny": dict(train=64, annotated=64, demonstrations=320, validation=16, test=16, vocab_size=512,
                 sft_steps=20, batch_size=16, lr=3e-3, sft_eval_every=10, pretrain_steps=10,
                 model=dict(n_layer=1, n_head=2, n_embd=32, block_size=512),
                 samples_per_prompt=1, reward_steps=5, reward_lr=2e-3,
                 ppo=dict(updates=2, batch_size=8, minibatch_size=8, lr=3e-5, refresh_every=2, refresh_samples=4,
                          refresh_steps=2), eval_every=1, overopt_prompts=4,
                 lambdas=(0.0, 0.95), groups=(2, 4), revise_steps=(2, 3)),
}
