"""`python -m convswap`, which is also how `accelerate launch -m convswap run ...` starts each process."""

import sys

from convswap.cli import command_line

sys.exit(command_line())
