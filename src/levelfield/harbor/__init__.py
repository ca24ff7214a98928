"""Harbor interop: Harbor's job folders read as levelfield runs (`importing`).

Harbor (PyPI `harbor`) writes one `result.json` per trial; nothing here imports Harbor itself, so
reading its results needs no extra.
"""
