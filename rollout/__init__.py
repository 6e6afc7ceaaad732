"""roost.rollout: the rollout engine, its SGLang client, and the OpenAI-compatible gateway."""
