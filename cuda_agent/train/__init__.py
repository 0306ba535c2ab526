"""The training path: exports of runs (export.py), the RL environment (rl_env.py), and PPO on verl:
episodes (episodes.py), verl's tool and agent-loop glue (verl_glue.py, the only module importing
verl at import time), the user's PPO config (ppo_config.py) and verl's configuration from it
(verl_config.py, `cuda-agent train ppo`)."""
