"""A model's color vocabulary (free-report calibration, anchors, held-out angles) and the token surfaces its
answers come in; `convswap calibrate`.

May import: core, conventions, protocols, stimuli, readout.
"""
