"""The OpenTelemetry Resource of a service process: service.name (OTEL_SERVICE_NAME wins),
version, namespace, instance id and deployment environment."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from importlib import metadata as importlib_metadata

from opentelemetry.sdk.resources import Resource

from shared.settings import TelemetrySettings

SERVICE_NAMES = {
    "knowledge_store": "nucleus-knowledge-store",
    "llm_orchestration": "nucleus-llm-orchestration",
    "rag_pipeline": "nucleus-rag-pipeline",
}


def service_version() -> str:
    try:
        return importlib_metadata.version("nucleus-rag")
    except importlib_metadata.PackageNotFoundError:
        return "0.0.0"


def build_resource(service: str, settings: TelemetrySettings, env: Mapping[str, str]) -> Resource:
    """service.name (OTEL_SERVICE_NAME wins), version, namespace, instance, environment;
    OTEL_RESOURCE_ATTRIBUTES adds to (never replaces) these."""
    attributes = {
        "service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAMES.get(service, service),
        "service.namespace": "nucleus",
        "service.version": service_version(),
        "service.instance.id": str(uuid.uuid4()),
        "deployment.environment": settings.environment,
        "deployment.environment.name": settings.environment,
    }
    return Resource.create(attributes)


__all__ = ["SERVICE_NAMES", "build_resource"]
