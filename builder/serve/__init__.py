"""Serve a target's image with docker and wait until the endpoint is ready."""

from builder.serve.serve import Served, serve, stop
from builder.serve.wait import Ready, wait_ready

__all__ = ["Ready", "Served", "serve", "stop", "wait_ready"]
