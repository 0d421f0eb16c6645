"""The three Nucleus RAG services (each one's `main` module imports `services._openmp` first)."""
