"""Learning a tenant's ranking from its judged queries (docs/RANKING.md).

    train.py     LambdaMART (LightGBM, training only) and a linear candidate, as a residual on
                 today's fused score; calibration; the stored JSON model
    crossval.py  query folds (near-duplicates and shared judged documents together), nested
                 cross-validation over the candidate settings
    report.py    nDCG@10 per query, the paired report (mean gain, bootstrap interval, sign
                 test) and the save rule

LightGBM is imported by train.py only (the `learn` extra); serving evaluates the stored model
in numpy (ranking/trees.py).
"""
