"""Zip archives every part unpacks (packages, submissions, the bundles a runner fetches): one
reader that refuses traversal, links, control characters and decompression bombs, wherever
an archive comes from."""

from __future__ import annotations

import io
import lzma
import struct
import zipfile
import zlib
from pathlib import PurePosixPath

MAX_MEMBERS = 2000
MAX_RATIO = 200
STORED_ARCHIVE_MAX = 1 << 30
"""What an archive the platform stored itself (a package's bundle, a submission already taken)
may unpack to: its size was checked on the way in; this only bounds a damaged or planted one."""

# Besides BadZipFile (a bad CRC-32, a header that does not match), zipfile raises on a damaged or
# unusual archive: zlib.error, lzma.LZMAError or OSError (bz2) on a corrupt stream, EOFError on a
# truncated one, struct.error or ValueError on a header that lies, NotImplementedError on an
# unsupported method or flag, RuntimeError on an encrypted member.
READABLE_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
_DAMAGED = (zlib.error, lzma.LZMAError, EOFError, struct.error, ValueError, OSError,
            NotImplementedError)


class UnsafeArchive(ValueError):
    """The archive is refused; the message names the member and what is wrong with it."""


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, *, max_total: int) -> bytes:
    name = info.filename
    if info.flag_bits & 0x1:
        raise UnsafeArchive(f"{name!r} is encrypted; upload a zip without a password")
    if info.compress_type not in READABLE_METHODS:  # deflate64 (9) among others
        raise UnsafeArchive(f"{name!r} uses a compression method this server does not read "
                            f"(method {info.compress_type}); zip it again with plain deflate")
    try:
        with zf.open(info) as fh:
            return fh.read(max_total + 1)
    except zipfile.BadZipFile as exc:  # bad CRC-32, a local header that does not match
        raise UnsafeArchive(f"{name!r} is damaged in the archive ({exc})") from exc
    except (RuntimeError, *_DAMAGED) as exc:  # RuntimeError: encrypted after all
        raise UnsafeArchive(f"{name!r} could not be unpacked: the archive is damaged") from exc


def members(data: bytes, *, max_total: int = STORED_ARCHIVE_MAX,
            max_ratio: float | None = MAX_RATIO) -> dict[str, bytes]:
    """A zip's regular files by path; UnsafeArchive for traversal (an absolute path, `..`, a
    backslash or a drive colon), a link, a control character in a name, more than MAX_MEMBERS
    entries, more than `max_total` bytes unpacked, a ratio over `max_ratio` (None: an archive the
    server built itself, from a folder or files it never ratio-checked), or a damaged one."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, *_DAMAGED) as exc:
        raise UnsafeArchive("not a zip archive") from exc
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise UnsafeArchive(f"the archive has more than {MAX_MEMBERS} entries")
    out: dict[str, bytes] = {}
    total = 0
    for info in infos:
        name = info.filename
        path = PurePosixPath(name)
        if name.startswith("/") or ".." in path.parts or "\\" in name or ":" in name:
            raise UnsafeArchive(f"unsafe path in the archive: {name!r}")
        if not name.isprintable():  # a newline or an escape sequence in a listing or a log
            raise UnsafeArchive(f"control characters are not allowed in file names: {name!r}")
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise UnsafeArchive(f"symbolic links are not allowed: {name!r}")
        if info.is_dir():
            continue
        total += info.file_size
        if total > max_total:
            raise UnsafeArchive(f"the archive unpacks to more than {max_total} bytes")
        if max_ratio is not None and info.compress_size \
                and info.file_size / info.compress_size > max_ratio:
            raise UnsafeArchive(f"suspicious compression ratio for {name!r} (decompression "
                                "bomb?)")
        content = _read_member(zf, info, max_total=max_total)
        if len(content) != info.file_size:
            raise UnsafeArchive(f"{name!r} does not match its declared size")
        out[name] = content
    return out
