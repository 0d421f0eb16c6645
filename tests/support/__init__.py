"""Test helpers shared by unit and integration tests (loopback doubles of paid APIs)."""
