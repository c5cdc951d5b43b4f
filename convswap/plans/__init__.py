"""The pre-registered plan: one TOML file per experiment (`plan`), the ledger that registers and amends them
(`ledger`), the calibration numbers a plan may state (`calibration_rules`), the analyses it may name
(`analyses`); `convswap plan`.

May import: core, conventions, protocols, stimuli, readout, calibration.
"""
