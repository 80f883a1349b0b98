#!/usr/bin/env bash
# PPO with GAE on a small instruct model, rewarded per token by the facts task's critic through
# SpanRewardManager (manager.py); README.md beside this file is the recipe. Run it from anywhere:
#   bash integrations/verl/run_ppo.sh [more verl overrides, e.g. trainer.total_epochs=2]
# MODEL, GPUS and DATA may be set in the environment. tests/test_verl.py composes verl's config
# with the overrides below (one per line, as written) and checks them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/integrations/verl
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
GPUS=${GPUS:-1}
DATA=${DATA:-$HOME/data/text2grad_facts}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # verl's workers import align, guards, ppo

if [ ! -f "$DATA/train.parquet" ]; then
    (cd "$ROOT" && python -m integrations.verl.export_facts "$DATA")
fi

# The method's settings first (ppo.PPOConfig's gamma, lambda, beta and epochs; the sampled-token
# KL, k1, in the reward), then the reward: the manager, the critic, and the colocated reward model
# that verl's rm_scores hook needs (it loads it; a programmatic critic never asks it).
python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    algorithm.gamma=1.0 \
    algorithm.lam=0.95 \
    algorithm.use_kl_in_reward=True \
    algorithm.kl_penalty=kl \
    algorithm.kl_ctrl.type=fixed \
    algorithm.kl_ctrl.kl_coef=0.05 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.ppo_epochs=4 \
    reward.reward_manager.source=importlib \
    reward.reward_manager.module.path=$HERE/manager.py \
    reward.reward_manager.name=SpanRewardManager \
    reward.custom_reward_function.path=$HERE/critics.py \
    reward.custom_reward_function.name=facts_critic \
    reward.reward_model.enable=True \
    reward.reward_model.enable_resource_pool=False \
    reward.reward_model.model_path=$MODEL \
    reward.reward_model.rollout.name=vllm \
    reward.reward_model.rollout.tensor_model_parallel_size=1 \
    reward.reward_model.rollout.gpu_memory_utilization=0.1 \
    data.train_files=$DATA/train.parquet \
    data.val_files=$DATA/test.parquet \
    data.train_batch_size=64 \
    data.max_prompt_length=256 \
    data.max_response_length=64 \
    actor_rollout_ref.model.path=$MODEL \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    critic.model.path=$MODEL \
    critic.optim.lr=1e-5 \
    critic.ppo_micro_batch_size_per_gpu=8 \
    trainer.n_gpus_per_node=$GPUS \
    trainer.nnodes=1 \
    trainer.total_epochs=1 \
    trainer.test_freq=5 \
    trainer.logger=console \
    trainer.project_name=text2grad \
    trainer.experiment_name=facts_gae_spans \
    "$@"
