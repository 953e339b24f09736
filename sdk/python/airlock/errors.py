"""The exceptions of the Airlock SDK: one class per stable API error code.

Every error the daemon answers with, ``{"error": {"code", "message", "details"}}``, is
raised as the subclass of :class:`AirlockError` named for its code (``not_found`` is
:class:`NotFound`, and so on). Failing to reach the daemon at all is
:class:`Unavailable`, whose ``retryable`` is true: the outcome of a mutating call is then
unknown, and retrying it with the same idempotency key is safe.
"""

from typing import Any, Dict, Optional, Type

__all__ = [
    "AirlockError",
    "NotFound",
    "InvalidArgument",
    "AlreadyExists",
    "VersionConflict",
    "IdempotencyConflict",
    "QuotaExceeded",
    "PermissionDenied",
    "Unauthenticated",
    "FailedPrecondition",
    "Unavailable",
    "Internal",
    "StreamBroken",
    "error_from_code",
]


class AirlockError(Exception):
    """An error from Airlock: the daemon's answer, or failing to reach it.

    Attributes:
        code: the stable API code, e.g. ``"not_found"``.
        message: the message meant for people.
        status: the HTTP status of the answer (0 when there was no answer).
        details: machine-readable details, when the daemon gave any.
        retryable: whether trying the same call again may succeed.
    """

    code: str = "internal"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        details: Optional[Dict[str, Any]] = None,
        code: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.details: Dict[str, Any] = dict(details or {})
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"


class NotFound(AirlockError):
    """``not_found``: no sandbox, snapshot, session or file of that name."""

    code = "not_found"


class InvalidArgument(AirlockError, ValueError):
    """``invalid_argument``: a bad request. Also raised by the SDK itself, before
    sending, for arguments it can check; it is a :class:`ValueError` too."""

    code = "invalid_argument"


class AlreadyExists(AirlockError):
    """``already_exists``: a sandbox (or other resource) of that name exists."""

    code = "already_exists"


class VersionConflict(AirlockError):
    """``version_conflict``: the resource changed since the version given (If-Match)."""

    code = "version_conflict"


class IdempotencyConflict(AirlockError):
    """``idempotency_conflict``: an idempotency key reused with a different request."""

    code = "idempotency_conflict"


class QuotaExceeded(AirlockError):
    """``quota_exceeded``: a cap (live sandboxes, rate, size) was reached."""

    code = "quota_exceeded"
    retryable = True


class PermissionDenied(AirlockError):
    """``permission_denied``: the caller's roles do not allow the call."""

    code = "permission_denied"


class Unauthenticated(AirlockError):
    """``unauthenticated``: no valid bearer token (TCP only)."""

    code = "unauthenticated"


class FailedPrecondition(AirlockError):
    """``failed_precondition``: the call does not fit the current state (for example
    restoring a running sandbox)."""

    code = "failed_precondition"


class Unavailable(AirlockError):
    """``unavailable``: the daemon is down, unreachable or busy. The outcome of a
    mutating call is unknown; trying again is safe with an idempotency key."""

    code = "unavailable"
    retryable = True


class Internal(AirlockError):
    """``internal``: the daemon failed (or answered with a code this SDK does not know)."""

    code = "internal"


class StreamBroken(Unavailable):
    """A streamed answer ended before its result: the connection broke, and how the
    command ended is unknown."""


_BY_CODE: Dict[str, Type[AirlockError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        InvalidArgument,
        AlreadyExists,
        VersionConflict,
        IdempotencyConflict,
        QuotaExceeded,
        PermissionDenied,
        Unauthenticated,
        FailedPrecondition,
        Unavailable,
        Internal,
    )
}

_CODE_FOR_STATUS = {
    400: "invalid_argument",
    413: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "failed_precondition",
    412: "version_conflict",
    429: "quota_exceeded",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


def error_from_code(
    code: str, message: str, *, status: int = 0, details: Optional[Dict[str, Any]] = None
) -> AirlockError:
    """Return the exception for an API error code; an unknown code gives
    :class:`Internal` carrying that code."""
    cls = _BY_CODE.get(code, Internal)
    return cls(message, status=status, details=details, code=code)


# The HTTP status the API answers each code with (errdefs' table), for errors that
# arrive inside a stream, after its 200.
_STATUS_FOR_CODE = {
    "not_found": 404,
    "invalid_argument": 400,
    "already_exists": 409,
    "version_conflict": 412,
    "idempotency_conflict": 409,
    "quota_exceeded": 429,
    "permission_denied": 403,
    "unauthenticated": 401,
    "failed_precondition": 409,
    "unavailable": 503,
    "internal": 500,
}


def status_for_code(code: str) -> int:
    """The HTTP status the API gives an error code (500 for an unknown one)."""
    return _STATUS_FOR_CODE.get(code, 500)


def code_for_status(status: int) -> str:
    """The code of an error answer that is not the API's error shape (from a proxy)."""
    return _CODE_FOR_STATUS.get(status, "internal")
