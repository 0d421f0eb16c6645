"""The single translation of `shared.errors` into gRPC status on the server side."""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import grpc

from shared.errors import NucleusError, grpc_status

log = logging.getLogger(__name__)


def translate_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an async servicer method: NucleusError -> its status; anything else -> INTERNAL
    with a generic message (the traceback is logged, never sent to the caller)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except NucleusError as err:
            await context.abort(grpc_status(err), str(err))
        except grpc.aio.AbortError:
            raise
        except Exception:  # noqa: BLE001 - the boundary: log, answer INTERNAL
            log.exception("unhandled error in %s", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}")

    return wrapper
