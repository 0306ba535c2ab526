"""The evaluation harness: correctness, guards, timing, baselines and the reward.

Imports nothing from agent/, tools/, workspace/, pool/ or ray.
"""
