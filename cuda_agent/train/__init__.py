"""The training path: exports of runs (export.py), the RL environment (rl_env.py), the policy's loading
(models.py, the tiny model: tiny_model.py), the RFT warm-up on TRL (sft*.py), GRPO on one machine with
TRL (grpo.py: the environment TRL drives, grpo_env.py; its dataset, log and display: grpo_data.py,
grpo_log.py, grpo_progress.py) and PPO on verl: episodes (episodes.py), verl's tool and agent-loop glue
(verl_glue.py, the only module importing verl at import time), the user's PPO config (ppo_config.py) and
verl's configuration from it (verl_config.py, `cuda-agent train ppo`)."""
