"""Scorer-integrity checks: over every record of a log folder (prompts, keys, held-out angles, surfaces, pixel
answers re-parsed), and of a model before it is scored (which readouts of which alphabets can be trusted);
`convswap audit`, `convswap audit-model`.

May import: core, conventions, protocols, stimuli, readout, calibration, plans, runs, builder, analysis.
"""
