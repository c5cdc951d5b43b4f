"""Referents -> rendered prompts: conventions, option order, derangements, cell geometry; `convswap
conventions`.

May import: core.
"""
