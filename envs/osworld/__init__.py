"""OSWorld: a real desktop per episode, OSWorld's task format, config steps and evaluators.

Kept import-light: the desktop's control server runs from this package with the system
python3, which has none of roost's dependencies.
"""
