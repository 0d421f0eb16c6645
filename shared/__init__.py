"""Code every service uses: settings, errors, gRPC helpers, logging, telemetry, identity."""
