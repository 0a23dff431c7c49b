"""Domain errors; the API maps each to an HTTP status with its message."""


class DomainError(Exception):
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(DomainError):
    status = 404


class Forbidden(DomainError):
    status = 403


class Conflict(DomainError):
    status = 409


class Invalid(DomainError):
    status = 422


class TooLarge(DomainError):
    status = 413


class QuotaExceeded(DomainError):
    status = 429


class StorageFull(DomainError):
    """The server's disk (or the artifacts folder's quota) is full: nothing was stored."""

    status = 507


class Unauthenticated(DomainError):
    """No credential, or one the server does not (or no longer) accept."""

    status = 401
