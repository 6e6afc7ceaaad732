"""The OpenAI chat and text completions wires: request types, front-ends, answer bodies, routes."""
