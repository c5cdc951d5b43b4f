"""`convswap view`: a static site to read what a model said, beside the image, the prompt and the keys.

`runs` reads the records and the audit once and shapes what the pages show,
`images` re-renders each trial's image and checks it against the logged hash,
`site` writes the pages and their data, `serve` serves a built site on loopback.

May import: core, conventions, protocols, stimuli, readout, calibration, plans, runs, builder, analysis, audits.
"""
