"""Reading a model: the backends (transformers, served, OpenAI, Gemini, their image models, the simulated
observer), their registry by spec prefix (`registry`), the parsers of generated answers, the first-token and
log-probability readouts, and the providers' batch wire; `convswap presets`.

May import: core, conventions, protocols, stimuli.
"""
