"""How the spec names what the tables name by id: conventions, rungs and experiments, for readers and for
`check-numbers`, which looks for these names near a number to know which cell it quotes."""

from __future__ import annotations

# The spec's order of the color rungs (Table 1) and of the spatial conventions (Tables 2 and 8).
COLOR_RUNGS = ("word", "label", "hue_glossed", "hue_legend", "hue_bare")
SPATIAL_CONVENTIONS = (
    "cell_name",
    "normalized",
    "pixels",
    "pixels_glossed",
    "pixels_mispaired",
    "normalized_mispaired",
    "grid_ref",
    "percent",
)

# The spec's own row labels (Tables 1, 2, 3 and 8).
CONVENTION_LABELS = {
    "word": "color word",
    "label": "integer label, word listed",
    "hue_glossed": "hue angle with the word attached",
    "hue_legend": "hue angle, legend stated once",
    "hue_bare": "hue angle alone",
    "hue_glossed_mispaired": "CIELAB hue, name inline",
    "hue_legend_mispaired": "CIELAB hue, legend",
    "cell_name": "English cell name",
    "normalized": "normalized 0–999",
    "pixels": "absolute pixels",
    "pixels_glossed": "pixels, name attached",
    "pixels_mispaired": "pixels, name deranged",
    "normalized_mispaired": "normalized, name deranged",
    "grid_ref": "grid reference",
    "percent": "percentage",
    "grid_ref_mispaired": "grid reference, name deranged",
    "percent_mispaired": "percentage, name deranged",
}

# Other words a paper uses for a convention in running text.
CONVENTION_WORDS = {
    "word": ("word",),
    "label": ("label", "integer"),
    "hue_glossed": ("attached", "glossed"),
    "hue_legend": ("legend",),
    "hue_bare": ("alone", "bare"),
    "hue_glossed_mispaired": ("inline",),
    "hue_legend_mispaired": ("legend",),
    "cell_name": ("cell name", "English", "names"),
    "normalized": ("normalized",),
    "pixels": ("pixel",),
    "pixels_glossed": ("name attached", "glossed"),
    "pixels_mispaired": ("deranged", "mispaired"),
    "normalized_mispaired": ("deranged", "mispaired"),
    "grid_ref": ("grid reference", "grid ref"),
    "percent": ("percent",),
}

# Words that name an experiment in a paper's paragraph or table caption.
EXPERIMENT_WORDS = {
    "calibration": ("calibrat", "vocabular"),
    "color_ladder": ("color", "colour", "hue"),
    "color_readership": ("color", "colour", "hue", "mispaired", "deranged", "readership"),
    "synthetic_spatial": ("synthetic",),
    "coco_locate_identify": ("COCO", "photograph"),
    "coco_4x4": ("4x4", "4 \\times 4", "4 × 4", "sixteen"),
    "cross_model": ("COCO", "photograph", "models"),
    "new_conventions": ("grid reference", "percent", "new convention"),
}

# Experiments as a table row names them.
EXPERIMENT_LABELS = {
    "color_ladder": "color",
    "color_readership": "color",
    "synthetic_spatial": "synthetic grid",
    "coco_locate_identify": "COCO",
    "coco_4x4": "COCO 4x4",
    "cross_model": "COCO, models",
    "new_conventions": "COCO, new",
}

# The experiment each spec table reports, for tables without an experiment column.
TABLE_EXPERIMENTS = {
    "table1_color_ladder": "color_ladder",
    "table1_contrasts": "color_ladder",
    "table2_coco": "coco_locate_identify",
    "table_coco_4x4": "coco_4x4",
    "table_new_conventions": "new_conventions",
    "table4_model_pairs": "cross_model",
    "table5_vocabularies": "calibration",
    "table8_synthetic_spatial": "synthetic_spatial",
    "breakdowns": "coco_locate_identify",
}


def convention_label(convention: str) -> str:
    return CONVENTION_LABELS.get(convention, convention.replace("_", " "))


def names_of(value: str) -> tuple[str, ...]:
    """Every way a paper may write a row label: the id, the id with spaces, the spec's label, other words; for a
    model spec, its name without the backend prefix, organisation or instruction suffix."""
    names = {value, value.replace("_", " "), convention_label(value), *CONVENTION_WORDS.get(value, ())}
    if ":" in value:
        model = value.split(":", 1)[1].split("/")[-1].split(" (")[0]
        names.update({model, model.removesuffix("-Instruct")})
    return tuple(sorted(names))
