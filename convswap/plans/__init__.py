"""The pre-registered plan: one TOML file per experiment (`plan`), the ledger that registers and amends them
(`ledger`), the calibration numbers a plan may state (`calibration_rules`), the analyses it may name
(`analyses`), and what a registered contrast can detect before any data (`power`).  `convswap plan` is the
analysis layer's (`analysis.plan_commands`): `plan power --pilot` reads a pilot's records as the tables do.

May import: core, conventions, protocols, stimuli, readout, calibration.
"""
