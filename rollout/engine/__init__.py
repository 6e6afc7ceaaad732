"""The embedded rollout engine: a torch inference server speaking SGLang's native API."""
