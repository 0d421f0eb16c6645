"""The auth test material (tests/support/auth_material.py) as fixtures for these tests."""
from tests.support.auth_material import config, config_file, keys  # noqa: F401 - pytest fixtures
