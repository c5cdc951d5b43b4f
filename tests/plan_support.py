"""A minimal valid plan file shared by the plan and ledger tests."""

MINIMAL = """\
id = "demo"
version = 1
title = "A demo experiment"
spec_section = "5"
exclusions = ["none"]
failure_conditions = ["the contrast is not significant"]
registered_analyses = ["accuracy_table"]
post_hoc = ["misread_units"]

[design]
stimuli = "coco"
tasks = ["locate"]
conventions = ["cell_name", "pixels", "pixels_mispaired"]
conditions = ["visible"]
n = 200
seeds = [0]
grid = 3
readout = "both"
k = 9

[gate]
control = "cell_name"
threshold_points = 20
readout = "same_as_contrast"

[[hypotheses]]
id = "names_over_pixels"
statement = "names beat pixels"
endpoint = "accuracy"
contrast = ["cell_name", "pixels"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05
"""
