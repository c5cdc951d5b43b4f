"""Defaults that the command line shows in its help, kept apart from the modules that apply them.

Those modules load numpy, scipy and the model SDKs; `convswap --help`
needs only these values.  Each applying module imports its value from here.
"""

MIN_RESAMPLES = 10_000  # bootstrap resamples behind every interval (spec section 10)
DEFAULT_COLOR_WORDS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
MAX_EXAMPLES = 3  # answer-hidden examples `protocol build` shows its planner, at most
DEFAULT_SMOKE = 5  # items `protocol build` draws and parses to validate a protocol
# The simulated planners `protocol build --planner sim:<planner>` takes (convswap.builder.sim_planner.PLANNERS)
SIM_PLANNERS = ("perfect", "builder", "builder-slips", "builder-strict", "builder-stubborn")
