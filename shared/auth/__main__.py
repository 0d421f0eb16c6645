"""`python -m shared.auth new-key ...`: the API key tool (`shared.auth.api_keys.main`)."""
import sys

from shared.auth.api_keys import main

if __name__ == "__main__":
    sys.exit(main())
