"""What an SQLite failure means for the user, and the error that refuses a damaged store."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.errors import StoreError

#: Free space below which an I/O error where the store is is called a full disk.
FULL_BYTES = 1 << 20


def free_bytes(store_path: str) -> int | None:
    """Free bytes on the file system of a store's folder (None where it cannot be told)."""
    try:
        return shutil.disk_usage(Path(store_path).resolve().parent).free
    except OSError:
        return None


def disk_full(store_path: str) -> bool:
    """Whether the file system of a store's folder is (nearly) full."""
    free = free_bytes(store_path)
    return free is not None and free < FULL_BYTES


def explain(exc: BaseException, store_path: str | None = None) -> str:
    """What an SQLite error means for the user, in words; an I/O error on a full file system (SQLite says only
    "disk I/O error" when it cannot grow its -shm file) is named a full disk where `store_path` is given."""
    text = str(exc)
    low = text.lower()
    if "full" in low:
        return f"the disk is full ({text})"
    if "i/o error" in low and store_path and disk_full(store_path):
        return f"the disk is full ({free_bytes(store_path)} bytes free where the store is; SQLite says: {text})"
    if "malformed" in low or "corrupt" in low:
        return f"the file is damaged ({text})"
    if "not a database" in low or "encrypted" in low:
        return f"it is not an SQLite database ({text})"
    if "readonly" in low or "read-only" in low or "unable to open" in low or "permission" in low:
        return f"it cannot be written here: permissions or a read-only folder ({text})"
    return text


def damaged(path: str, detail: str) -> StoreError:
    """The StoreError that refuses a damaged store and says how to take in what it still holds."""
    return StoreError(
        f"store {path} is damaged ({detail}): harness does not write into a damaged store, and left it as it was. "
        f"Keep the file; take what it still holds into a new store with `harness results --import {path} --store NEW.db`, "
        "then use --store NEW.db (or move the file aside and start a new store)",
        source=path, field="--store",
    )
