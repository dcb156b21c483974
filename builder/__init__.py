"""qfn-int8kv release builder: config -> plan -> launch -> image -> serve -> measure -> bundle -> publish."""

__version__ = "0.1.0"
