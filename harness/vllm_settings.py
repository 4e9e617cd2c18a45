"""The settings the tests and the benchmarks start vLLM with on the embedded default model,
declared once: small and fixed, so that an engine starts in half a minute on CPU and fits beside
the rest of a run on a shared machine. A test that needs other settings adds them to these and
says why."""

# A 1 GiB KV cache and a 2,048-token context; 8 requests at once, as many as the batching and
# isolation tests send together.
VLLM = {"infer_backend": "vllm", "kv_cache_space_gb": 1, "max_model_len": 2048, "max_concurrent": 8}
