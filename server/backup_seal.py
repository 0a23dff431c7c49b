"""A backup sealed with a passphrase: its database file and every artifact encrypted, the
manifest (format, counts, checksums: nothing secret) left readable so that a sealed backup is
still recognised and its signature still checked without the passphrase.

Each file is encrypted whole with Fernet (cryptography: AES-128-CBC with an HMAC-SHA256, so a
file changed or a wrong passphrase is refused, never decrypted into garbage), under a key derived
from the passphrase with scrypt and a random salt kept in `SEAL`. A file is held in memory once
while it is sealed or opened: a course's database (tens to hundreds of MB) fits; the artifacts
are at most a submission's upload each.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

SEAL = "paragrade-seal.json"
"""The key derivation's parameters and salt (no secret in it)."""
SCRYPT = {"n": 2**15, "r": 8, "p": 1}
"""scrypt's cost: about 32 MiB and a tenth of a second per derivation (once per backup)."""
MIN_PASSPHRASE_CHARS = 12


class SealError(Exception):
    """A passphrase missing, too short or wrong, or a sealed file changed."""


def _fernet(passphrase: str, salt: bytes, params: dict[str, int]) -> Fernet:
    kdf = Scrypt(salt=salt, length=32, n=params["n"], r=params["r"], p=params["p"])
    return Fernet(base64.urlsafe_b64encode(kdf.derive(passphrase.encode())))


def _files(folder: Path, keep: set[str]) -> list[Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in keep]


def seal(folder: Path, passphrase: str, *, keep: set[str]) -> None:
    """Encrypt every file under `folder` in place but those named in `keep` (the manifest)."""
    if len(passphrase) < MIN_PASSPHRASE_CHARS:
        raise SealError(f"a backup's passphrase has at least {MIN_PASSPHRASE_CHARS} characters")
    salt = os.urandom(16)
    f = _fernet(passphrase, salt, SCRYPT)
    for path in _files(folder, keep):
        path.write_bytes(f.encrypt(path.read_bytes()))
    (folder / SEAL).write_text(json.dumps({
        "cipher": "fernet", "kdf": "scrypt", **SCRYPT,
        "salt": base64.b64encode(salt).decode()}) + "\n")


def sealed(folder: Path) -> bool:
    return (folder / SEAL).is_file()


@contextlib.contextmanager
def opened(folder: Path, passphrase: str | None, *, keep: set[str]) -> Iterator[Path]:
    """The sealed backup `folder` decrypted into a private temporary folder (removed after),
    `keep`'s files copied as they are."""
    if passphrase is None:
        raise SealError(f"{folder} is encrypted: give its passphrase "
                        "(PARAGRADE_SERVER_BACKUP_PASSPHRASE, or at the prompt)")
    try:
        params = json.loads((folder / SEAL).read_text())
        f = _fernet(passphrase, base64.b64decode(params["salt"]),
                    {k: int(params[k]) for k in SCRYPT})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SealError(f"{folder / SEAL} is damaged: {exc}") from None
    plain = Path(tempfile.mkdtemp(prefix="paragrade-restore-"))  # 0700
    try:
        for path in _files(folder, keep | {SEAL}):
            out = plain / path.relative_to(folder)
            out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                out.write_bytes(f.decrypt(path.read_bytes()))
            except InvalidToken:
                raise SealError(f"{path} does not open with this passphrase: a wrong "
                                "passphrase, or the file was changed") from None
            out.chmod(0o600)
        for name in keep:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, plain / name)
        yield plain
    finally:
        shutil.rmtree(plain, ignore_errors=True)
