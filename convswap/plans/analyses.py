"""Every analysis a plan may register or list as post hoc, by the name plans and table rows use.

A plan's `registered_analyses` and `post_hoc` name analyses from this catalog (hypotheses are named by their own
ids), so a typo is refused at `plan register` instead of leaving an analysis silently unregistered.  A table
builder labels its rows with one of these names; a name that is not here cannot be registered.
"""

from __future__ import annotations

ANALYSES: dict[str, str] = {
    # Per experiment, from its plan: every experiment gets these.
    "accuracy_table": "accuracy per model, condition, task and convention, with unscored counts",
    "contrast_table": "each convention against the plan's control: difference, exact McNemar, paired bootstrap, gate",
    "pooled_contrast_table": "each convention against the control across the models at once, its interval "
    "resampling models and items",
    "key_table": "readership of every mispaired convention: how often the answer follows the coordinate",
    "parse_failure_table": "answers that parse to no option, per convention and task",
    "instrument_agreement": "first-token and generated answers agreeing, where both readouts exist",
    "gate_sensitivity": "which models clear the capability gate as its threshold moves",
    "prompt_length": "prompt tokens per convention, so that length can be ruled out",
    "sampled_accuracy": "the accuracy a temperature-T sampler would reach, from the first-token logits, at T = 0.7 "
    "and 1.0, with intervals over trials",
    "mixed_effects": "each paired contrast over every item and model at once: a mixed-effects logistic model with "
    "crossed random intercepts (statsmodels' BinomialBayesMixedGLM) beside a GEE clustered by item",
    # Pixel answers under visual protocols.
    "outcome_table": "the outcome of every pixel answer per model and protocol: correct, incorrect, noncompliance, "
    "parser failure, generation failure",
    "complementarity_table": "every text convention against every protocol on the same trials: both right, text "
    "only, pixels only, neither, exact McNemar",
    # COCO trials: breakdowns by the metadata their trials carry.
    "side_asymmetry": "the answer-side (locate) difference against the question-side (identify) one",
    "image_half": "locate accuracy by the half of the image holding the object's center",
    "size_terciles": "locate accuracy by terciles of the object's area",
    "boundary_distance_terciles": "locate accuracy by terciles of the object's distance from its cell's border",
    "per_category": "locate accuracy per COCO category",
    # Calibration.
    "vocabulary_table": "each model's calibrated color vocabulary",
    "calibration_yield": "how many calibration angles each model names stably",
    "surface_resolution": "the token surface each model answers in, per alphabet",
    # Color ladder.
    "calibration_angle_accuracy": "color accuracy on calibration angles beside held-out ones",
    # Across models.
    "accuracy_figure": "accuracy per model and convention, drawn",
    "pair_table": "paired differences of every model pair per convention",
    "readership_across_models": "readership against accuracy across models",
    "headroom_normalized_gap": "the convention gap divided by the control's headroom above chance",
    # Audits of the reading.
    "misread_units": "answers that read coordinates in the wrong units",
    "grid_transforms": "answers explained by a transposed or mirrored grid",
}
