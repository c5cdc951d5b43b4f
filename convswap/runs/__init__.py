"""Running a registered experiment: a request resolved once into a checked context (`context`), then its units
read (`runner`, `reading`, `pixel_answers`, `protocol_reader`) and kept as records (`logs`, `folder_lock`,
`launcher`, `merge`, `batch`), and what reads them back trusts (`record_checks`, `provenance`, `scoring`,
`summary`); `convswap run`, `merge`, `batch`.

May import: core, conventions, protocols, stimuli, readout, calibration, plans.
"""
