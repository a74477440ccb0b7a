"""``python -m dive_core.compress``: the command ``dive-compress``."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
