"""Deployment: the local supervisor (`nucleus up`) and container manifests."""
