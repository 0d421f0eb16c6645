"""Traces and metrics: the helpers libraries and cores call, and the SDK each service process
installs once.

Libraries and cores use `opentelemetry-api` only, through the first group of modules; these
work unchanged (as a cheap no-op) when no SDK is installed. The second group is the SDK set-up,
done once per process by the service runner (`providers.setup_telemetry`).

    API only: libraries, cores and adapters
      genai               embeddings_span(), end_embeddings(), retrieval_attributes()
                          (GenAI semantic conventions); capture_content(), set_content_attribute():
                          query / document text on spans only when NUCLEUS_OTEL_CAPTURE_CONTENT=true
      rpc                 gRPC under the RPC semantic conventions: span names, status codes,
                          RpcDurations (rpc.client.call.duration / rpc.server.call.duration)
      client_interceptor  ClientTracingInterceptor: a CLIENT span per call, W3C `traceparent` sent
      server_interceptor  ServerTracingInterceptor: the caller's context extracted, a SERVER span
    SDK: one service process
      resource            build_resource(): service name, version, instance, environment
      span_redaction      Redactor, RedactingSpanProcessor: the safety net in front of each exporter
      stage_metrics       StageMetrics, StageMetricsProcessor: calls / errors / duration per stage
      file_exporters      the local, rotated JSONL trace and metrics files
      env_exporters       the OTLP / console exporters the standard OTEL_* variables ask for
      providers           build_telemetry(), setup_telemetry(), shutdown_telemetry()

Nothing is imported here, so importing an API module never loads the SDK.
"""
