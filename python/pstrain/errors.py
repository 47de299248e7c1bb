"""Exceptions of pstrain: one class per status code family, named as in ``tf.errors``.

Every error of the C++ client and servers is raised as the class of its status code, with the C++
status message as its message (``str(e)``), e.g. ``DeadlineExceededError("Register at chief
127.0.0.1:2222: ...")``. All derive from :class:`Error`; some also from the built-in exception
that Python code already catches for that kind of failure (``InvalidArgumentError`` is a
``ValueError``, ``DeadlineExceededError`` a ``TimeoutError``, ``UnavailableError`` a
``ConnectionError``).
"""


class Error(Exception):
    """Base class of pstrain's errors. ``code`` is the status code's name, ``message`` the text."""

    code = "UNKNOWN"

    def __init__(self, message=""):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return self.message


class CancelledError(Error):
    """The call was cancelled: from pull or push, the chief is ending the job."""
    code = "CANCELLED"


class UnknownError(Error):
    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    """Bad input: a wrong dtype, shape or count, a bad option, a TF_CONFIG that does not parse."""
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(Error, TimeoutError):
    """A call did not end within the client's timeout (an unreachable chief, a sync wait)."""
    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error):
    code = "NOT_FOUND"


class AlreadyExistsError(Error):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(Error):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    """A call out of order: after done(), a push before any pull, pull with no variables."""
    code = "FAILED_PRECONDITION"


class ForkedProcessError(FailedPreconditionError):
    """A Client used in a child process of ``os.fork()``: its thread and connections stayed in
    the parent, so no call can run there. Connect again in the child (a worker task of its own)."""


class AbortedError(Error):
    code = "ABORTED"


class OutOfRangeError(Error):
    code = "OUT_OF_RANGE"


class UnimplementedError(Error):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    code = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    """A peer could not be reached."""
    code = "UNAVAILABLE"


class DataLossError(Error):
    code = "DATA_LOSS"


class UnauthenticatedError(Error):
    code = "UNAUTHENTICATED"


# By status code number (absl::StatusCode, the same as gRPC's).
_BY_CODE = {
    1: CancelledError, 2: UnknownError, 3: InvalidArgumentError, 4: DeadlineExceededError,
    5: NotFoundError, 6: AlreadyExistsError, 7: PermissionDeniedError,
    8: ResourceExhaustedError, 9: FailedPreconditionError, 10: AbortedError, 11: OutOfRangeError,
    12: UnimplementedError, 13: InternalError, 14: UnavailableError, 15: DataLossError,
    16: UnauthenticatedError,
}

__all__ = ["Error", "ForkedProcessError"] + [cls.__name__ for cls in _BY_CODE.values()]


def _from_status(code, message):
    """The exception for a C++ status (used by the extension module)."""
    return _BY_CODE.get(code, UnknownError)(message)
