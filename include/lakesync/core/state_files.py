"""lakesync's one way to write a state file: whole or not at all.

State files (``full_load.json``, the stream's progress and topic identities, its id, the dev stack's
settings) are read by other processes while they are rewritten, and decide what runs next; a reader that saw
half a file would start from the wrong place. So the new content goes to a temporary file in the same folder
(the same file system), is flushed to disk, and replaces the old file with one ``os.replace``, which POSIX
and Windows make atomic: a reader sees the old content or the new, and a crash leaves the old one.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def write_text_atomically(path: Path, text: str, *, private: bool = False) -> None:
    """Replace the content of ``path`` with ``text`` atomically (see the module docstring).

    ``private`` creates the file readable by its owner only (it holds passwords). The temporary file's name
    is unique per process and thread, so concurrent writers never write into each other's file; the last
    ``os.replace`` wins.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        with os.fdopen(os.open(tmp, flags, 0o600 if private else 0o666), "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())  # the data is on disk before the name points at it
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomically(path: Path, document: Any, *, private: bool = False, sort_keys: bool = False) -> None:
    """``document`` as indented JSON in ``path``, written atomically; a document that can't be serialised
    raises before anything is written."""
    write_text_atomically(path, json.dumps(document, indent=2, sort_keys=sort_keys), private=private)
