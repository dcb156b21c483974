"""tests/serve uses the same docker and target fixtures as tests/image."""

from tests.image.conftest import base_image, docker_client, free_port, pinned  # noqa: F401
