import _proof  # noqa: F401  (a planted module: see handler.py)
