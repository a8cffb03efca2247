"""The pipeline's stage names, in the order the source's forward method computes them.

Pipeline order matters: `first_divergent_stage` and the diagnosis walk the stages in this
order, because a wrong early stage makes every later one wrong.
"""

STAGES: tuple[str, ...] = (
    "inputs",
    "queries",
    "keys",
    "values",
    "scores",
    "scaled_scores",
    "weights",
    "context",
)
