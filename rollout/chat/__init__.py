"""roost.rollout.chat: chat templates, tokenization by segments, tool-call and reasoning parsing."""
