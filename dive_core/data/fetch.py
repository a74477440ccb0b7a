"""The download of an official BEIR zip (rule download_beir), refused unless its sha256 is the
one the dataset registry keeps (config/datasets.yaml ``zip_sha256``); :mod:`.stage` unpacks it.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.request
from pathlib import Path

from ..atomic import atomic_path
from .load import ChecksumError, DataError


def download_zip(
    url: str,
    dest: str | os.PathLike,
    sha256: str | None,
    timeout: float = 60.0,
    progress: bool = True,
) -> str:
    """Download ``url`` to ``dest`` and verify its sha256 before it appears under ``dest``.

    An unknown hash (``sha256`` None or empty) is refused before any download: BEIR zips are
    only accepted against a hash kept in the dataset registry.
    """
    dest = Path(dest)
    if not sha256:
        raise ChecksumError(
            f"no known sha256 for {url}: refusing to download an unverifiable file. Add the "
            "official sha256 to config/datasets.yaml (zip_sha256) or point beir_data_dir / "
            "BEIR_DATA_DIR at a local copy"
        )
    from tqdm import tqdm

    h = hashlib.sha256()
    with atomic_path(dest, suffix=".part") as tmp:
        try:
            req = urllib.request.Request(url, headers={"User-Agent": "dive-pipeline"})
            with urllib.request.urlopen(req, timeout=timeout) as resp, open(tmp, "wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name,
                          disable=not progress, mininterval=2.0) as bar:
                    while block := resp.read(1 << 20):
                        out.write(block)
                        h.update(block)
                        bar.update(len(block))
        except (OSError, http.client.HTTPException) as exc:
            raise DataError(
                f"cannot download {url}: {exc}. Without internet, set beir_data_dir in the config "
                "or the BEIR_DATA_DIR environment variable to a local BEIR directory"
            ) from exc
        got = h.hexdigest()
        if got != sha256.strip().lower():
            raise ChecksumError(
                f"{url}: sha256 {got} does not match the known value {sha256}; refused "
                "(nothing was kept)"
            )
    return got
