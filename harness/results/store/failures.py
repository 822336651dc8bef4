"""What an SQLite failure means for the user, and the error that refuses a damaged store."""

from __future__ import annotations

from harness.errors import StoreError


def explain(exc: BaseException) -> str:
    """What an SQLite error means for the user, in words."""
    text = str(exc)
    low = text.lower()
    if "full" in low:
        return f"the disk is full ({text})"
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
