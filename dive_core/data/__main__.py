"""``python -m dive_core.data check DIR``: the collection checker's command line (:func:`main`)."""

from . import main

if __name__ == "__main__":
    raise SystemExit(main())
