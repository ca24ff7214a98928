"""Harbor interop: Harbor's jobs, submissions and leaderboards read as levelfield runs.

`importing` assembles the import from one module per concern: `layout` (which folders hold
trials, and which submission each belongs to), `trial_file` (one trial folder's facts),
`reasons` (Harbor's exception types → the agent's failure or infrastructure) and `flags` (what
looks wrong with a submission). Harbor (PyPI `harbor`) writes one `result.json` per trial;
nothing here imports Harbor itself, so reading its results needs no extra.
"""
