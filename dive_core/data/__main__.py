"""``python -m dive_core.data check DIR``: the collection checker's command line (:func:`.check.main`)."""

from .check import main

if __name__ == "__main__":
    raise SystemExit(main())
