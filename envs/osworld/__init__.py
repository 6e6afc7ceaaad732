"""OSWorld: a real desktop per episode, OSWorld's task format, observations, actions and evaluators.

Kept import-light: the desktop's control server runs `python3 -m roost.envs.osworld.desktop.server`
with the system Python, which has none of roost's dependencies.
"""
