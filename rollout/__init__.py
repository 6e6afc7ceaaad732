"""roost.rollout: the rollout engine, its SGLang client, and the OpenAI-compatible gateway.

Subpackages, and the contracts of the gateway and the engine: docs/architecture.md.
"""
