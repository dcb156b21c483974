"""qfn-int8kv release builder: config -> render -> image -> serve -> measure -> bundle -> publish."""

__version__ = "0.1.0"
