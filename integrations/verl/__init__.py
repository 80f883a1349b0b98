"""Text2Grad's span rewards in verl 0.9.1 (README.md here is the recipe):
    manager.py       the reward manager: each response's critique -> a reward per token in rm_scores
    estimator.py     GRPO that keeps where the rewards land, registered as a verl estimator
    critics.py       the critics the manager asks: the facts task's, or an LLM judge
    export_facts.py  the facts task as verl's dataset
    run_ppo.sh       PPO with GAE on a small instruct model
"""
