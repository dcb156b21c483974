"""The ple-mmap patch: its PLE classes under memory limits (CPU, docker) and its lookups on a GPU."""
