"""Set before any gRPC import: the suite starts many child processes while gRPC's asyncio side
serves the session loop; gRPC's fork handlers are not needed for children that exec at once."""
import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
