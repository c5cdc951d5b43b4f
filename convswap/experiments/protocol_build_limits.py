"""The protocol builder's limits, apart from the builder so that `convswap --help` states them without loading it."""

MAX_EXAMPLES = 3
DEFAULT_SMOKE = 5
