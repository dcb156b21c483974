"""Serve a target's image with docker and wait until the endpoint is ready."""

from builder.serve.container import container_name
from builder.serve.serve import Interrupted, Served, serve, stop
from builder.serve.wait import Ready, wait_ready

__all__ = ["Interrupted", "Ready", "Served", "container_name", "serve", "stop", "wait_ready"]
