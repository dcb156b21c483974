"""builder.plan against vLLM's own KV planning and against the recorded KV pools (CPU)."""
