"""Why a source could not be read, in words a reader can act on: never an exception's text.

Issue 48: the report said "Savings Plans / RI coverage unavailable (ClientError: An error occurred (500) ... <!doctype
html> ...)" and "(NoCredentialsError: Unable to locate credentials)". An exception's text is for logs; a report says
what happened in a few words (no credentials, access denied, not reachable, a server error) and what was used
instead. Pure: it reads the error's class name and, for an AWS error, its code and HTTP status, never imports botocore.
"""

from __future__ import annotations

import re
from typing import Any

_NO_CREDENTIALS = frozenset(
    {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "NoAuthTokenError"}
)
_NOT_REACHABLE = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionError", "ConnectionClosedError"}
)


def _aws_error(error: BaseException) -> tuple[str, int | None]:
    """An AWS error's code and HTTP status (botocore's ``ClientError.response``), when it has them."""
    response: Any = getattr(error, "response", None)
    if not isinstance(response, dict):
        return "", None
    code = str((response.get("Error") or {}).get("Code") or "")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return re.sub(r"[^A-Za-z0-9.]", "", code)[:60], status if isinstance(status, int) else None


def unavailable(error: BaseException) -> str:
    """A few words for why a read failed: ``no AWS credentials``, ``access denied``, ``not reachable``, ``a server
    error (HTTP 500)``, ``throttled``, ``refused (ValidationException)``, else ``failed (RuntimeError)``."""
    name = type(error).__name__
    words = getattr(error, "words", None)  # already said in words (a recorded run's source that could not be read)
    if isinstance(words, str) and words:
        return words
    if name in _NO_CREDENTIALS:
        return "no AWS credentials"
    if name in _NOT_REACHABLE or isinstance(error, ConnectionError | TimeoutError):
        return "not reachable"
    code, status = _aws_error(error)
    text = code or str(error)[:200]
    if "AccessDenied" in text or "UnauthorizedOperation" in text or status == 403:
        return "access denied"
    if "Throttl" in text or status == 429:
        return "throttled"
    if status is not None and status >= 500:
        return f"a server error (HTTP {status})"
    if code:
        return f"refused ({code})"
    return f"failed ({name})"
