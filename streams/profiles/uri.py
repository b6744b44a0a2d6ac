"""Where a profile dump may be read from: ``ProfileReady.uri`` confined to configured roots.

Why: the ``uri`` of a ``profile`` event comes from the wire; a worker that opened whatever
it names would read (and parse, and quote into incidents) any file the worker can reach.
``resolve_profile_uri`` is the one gate: it accepts a plain path or a ``file://`` URI that,
after following symlinks, lies inside one of the roots (``Settings.profile_root_paths``,
default ``$STEPLENS_HOME/profiles``), and rejects everything else with a reason. Pure: it
reads no file, it only resolves the path (``Path.resolve`` follows symlinks that exist).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

MAX_URI_CHARS = 4096


class ProfileUriError(ValueError):
    """A profile uri points outside the configured roots, or is not a local path at all."""


def _local_path(uri: str) -> str:
    """The path a uri names: a plain path as is, ``file://[localhost]/path`` percent-decoded."""
    if "://" not in uri and not uri.startswith("file:"):
        return uri
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise ProfileUriError(f"profile uri scheme {parts.scheme!r} is not supported (only local paths and file://)")
    if parts.netloc not in ("", "localhost"):
        raise ProfileUriError(f"profile uri names host {parts.netloc!r}; only local files are read")
    if parts.query or parts.fragment:
        raise ProfileUriError("profile uri must not carry a query or fragment")
    return unquote(parts.path)


def resolve_profile_uri(uri: str, roots: Sequence[Path]) -> Path:
    """The real path ``uri`` names, if it lies inside one of ``roots``; else ``ProfileUriError``.

    Rejected: empty or over-long uris, NUL bytes (raw or ``%00``), any ``..`` component,
    schemes other than ``file``, other hosts, and paths that (after symlinks) leave every
    root. A relative path is taken relative to the first root.
    """
    if not roots:
        raise ProfileUriError("no profile roots are configured (STEPLENS_PROFILE_ROOTS)")
    if not uri or len(uri) > MAX_URI_CHARS:
        raise ProfileUriError(f"profile uri must have 1..{MAX_URI_CHARS} characters")
    if "\x00" in uri:
        raise ProfileUriError("profile uri contains a NUL byte")
    raw = _local_path(uri)
    if not raw or "\x00" in raw:
        raise ProfileUriError("profile uri contains a NUL byte or names no path")
    if ".." in PurePosixPath(raw).parts:
        raise ProfileUriError(f"profile uri {uri!r} contains '..' (path traversal)")
    real_roots = [Path(r).expanduser().resolve() for r in roots]
    candidate = Path(raw) if Path(raw).is_absolute() else real_roots[0] / raw
    resolved = candidate.resolve()
    for root in real_roots:
        if resolved == root or resolved.is_relative_to(root):
            return resolved
    shown = ", ".join(str(r) for r in real_roots)
    raise ProfileUriError(f"profile uri {uri!r} resolves to {resolved}, outside the profile roots ({shown})")
