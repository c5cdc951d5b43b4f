"""The trials: the CIELAB wheel and its swatches, color and spatial arrays, crossover pairs, COCO trials and
items files with their answer forms, and the images they render; `convswap prompts`, `coco-select`, `coco-items`.

May import: core, conventions, protocols.
"""
