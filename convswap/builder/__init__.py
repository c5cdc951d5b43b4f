"""A visual protocol built for a new benchmark: planned by a model, checked statically, smoke-tested on a
painter and declared (`protocol_build`), and its parser's sensitivity (`parser_sensitivity`); `convswap
protocols` and `convswap protocol` (parse, build).  It reads models as a run does, so it sits above the runs.

May import: core, conventions, protocols, stimuli, readout, calibration, plans, runs.
"""
