"""What the kubelet client raises; gRPC errors are translated into these inside ``kubelet/``.

Every message is one line, fit for a log field and ``/debug/allocations``' ``last_error``.
"""

from __future__ import annotations

__all__ = [
    "KubeletError",
    "KubeletRateLimited",
    "KubeletUnavailable",
    "MessageTooLarge",
    "MethodUnavailable",
    "PodNotFound",
    "ReplyUndecodable",
]


def _one_line(message: str) -> str:
    return " ".join(message.split())


class KubeletError(Exception):
    """The kubelet did not give what was asked; ``str()`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))

    @property
    def message(self) -> str:
        return str(self.args[0])


class KubeletUnavailable(KubeletError):
    """The socket is missing or refuses (UNAVAILABLE), or the call ran past its deadline."""


class KubeletRateLimited(KubeletError):
    """The kubelet answered RESOURCE_EXHAUSTED, or we refused locally while backing off."""


class MessageTooLarge(KubeletError):
    """A reply exceeded the client's max_message_bytes."""


class ReplyUndecodable(KubeletError):
    """The kubelet answered with bytes that are not the expected protobuf message."""


class MethodUnavailable(KubeletError):
    """The kubelet does not know the method (UNIMPLEMENTED) or has it disabled."""

    def __init__(self, message: str, *, method: str) -> None:
        super().__init__(message)
        self.method = method


class PodNotFound(KubeletError):
    """``Get`` answered that the kubelet knows no such pod."""

    def __init__(self, message: str, *, namespace: str, name: str) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.name = name
