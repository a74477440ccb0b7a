"""Imported first by every workflow script: puts this checkout (the parent of
``workflow_scripts/``) at the front of ``sys.path`` so that ``import dive_core`` finds the
package next to the Snakefile, locally, in a conda environment and on a cluster node alike.
Snakemake itself only adds the script's own folder to the path."""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
