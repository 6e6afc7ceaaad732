"""ALFWorld: the real `alfworld` package (TextWorld + PDDL) behind roost's Env protocol.

- `env`: `AlfworldEnv` and its factory (the registry's entry point).
- `catalog`: where the games are and which games each split holds.
- `game`: one loaded TextWorld PDDL game, and the pool that reuses them.
- `scenes`, `gamegen`, `fixtures`: the offline generator of small valid game sets.
"""
