"""Engine API types and the clients of every engine family (SGLang's native API, vLLM's token-in API), and vLLM's launcher."""
