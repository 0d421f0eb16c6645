"""One MiniLM model for the session's tests that only encode with it."""
import pytest


@pytest.fixture(scope="session")
def minilm_model():
    """all-MiniLM-L6-v2 as a sentence-transformers model (benchmarks.baseline `load_model`: offline, CPU),
    loaded once for the session. Tests only encode with it (read-only); tests of how the services load
    and serve the model start their own."""
    from benchmarks.baseline import load_model

    return load_model()
