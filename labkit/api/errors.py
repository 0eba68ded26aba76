"""API errors and their three wire shapes: the HTTP body, the flat SSE event, the nested WS event.

>>> err = previous_response_not_found("resp_x")
>>> err.status, err.body()["error"]["code"]
(400, 'previous_response_not_found')
>>> err.ws_event()["error"]["param"]
'previous_response_id'
"""

from __future__ import annotations

from typing import Any

from labkit.api.event_types import ERROR


class APIError(Exception):
    """An error answered to the client; the server keeps serving."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers  # the HTTP headers the answer carries (a rate limit's, a retry's), if any

    def fields(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}

    def body(self) -> dict[str, Any]:
        """HTTP: ``{"error": {message, type, param, code}}``."""
        return {"error": self.fields()}

    def ws_event(self, stream_id: str | None = None) -> dict[str, Any]:
        """WebSocket mode: the error nested under ``error``, with the HTTP status beside it, and
        the lane it is about (``stream_id``) when that is a named one.

        The code is always a string here (the Open Responses schema requires one): an error
        with no specific code carries its type. Headers an HTTP answer would carry (a rate
        limit's) are in ``error.headers``, as the API's WebSocket errors have them.

        >>> err = rate_limited("Slow down.", headers={"x-ratelimit-limit-requests": "1"})
        >>> err.ws_event("lane-a")["error"]["headers"], err.ws_event("lane-a")["stream_id"]
        ({'x-ratelimit-limit-requests': '1'}, 'lane-a')
        """
        fields = {**self.fields(), "code": self.code or self.type}
        if self.headers:
            fields["headers"] = dict(self.headers)
        event = {"type": ERROR, "status": self.status, "error": fields}
        if stream_id is not None:
            event["stream_id"] = stream_id
        return event

    def sse_event(self, sequence_number: int) -> dict[str, Any]:
        """SSE: the error's fields flat (as the official SDK reads them) and nested under
        ``error`` (as the Open Responses specification has them)."""
        return {
            "type": ERROR,
            "code": self.code,
            "message": self.message,
            "param": self.param,
            "error": self.fields(),
            "sequence_number": sequence_number,
        }


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def previous_response_not_found(response_id: str) -> APIError:
    return invalid_request(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def response_not_found(response_id: str) -> APIError:
    return APIError(
        404,
        f"Response with id '{response_id}' not found.",
        type="not_found_error",
        code="not_found",
    )


def model_not_found(message: str) -> APIError:
    return invalid_request(message, param="model", code="model_not_found")


def context_length_exceeded(input_tokens: int, model: str, window: int, limit: int) -> APIError:
    """400: the input is past what the model reads, its context window less the output's part.
    The API's own sentence, then the counts (labkit's addition, so a learner sees how far over).

    >>> err = context_length_exceeded(100_000, "labkit-spark", window=128_000, limit=95_232)
    >>> err.status, err.code, err.param
    (400, 'context_length_exceeded', 'input')
    >>> err.message.split(". ")[-1][:58]
    'The input is 100,000 tokens; labkit-spark reads at most 95'
    """
    return invalid_request(
        "Your input exceeds the context window of this model. Please adjust your input and try again. "
        f"The input is {input_tokens:,} tokens; {model} reads at most {limit:,} "
        f"(its {window:,}-token window less {window - limit:,} kept for the output).",
        param="input",
        code="context_length_exceeded",
    )


def authentication_error(message: str = "Incorrect API key provided.") -> APIError:
    return APIError(401, message, type="authentication_error", code="invalid_api_key")


def rate_limited(
    message: str, code: str = "rate_limit_exceeded", headers: dict[str, str] | None = None
) -> APIError:
    """429: the client must slow down (a per-key limit, or a full WebSocket queue)."""
    return APIError(429, message, type="rate_limit_error", code=code, headers=headers)


def too_large(message: str) -> APIError:
    """413: a request body over the server's limit."""
    return APIError(413, message, code="request_too_large")


RETRY_AFTER_S = 1  # how long a client told to retry (a 503) waits first


def database_unavailable(cause: str, *, locked: bool) -> APIError:
    """503: the server's database stayed locked by another process, or cannot be written (a
    full disk): nothing the client did, and a retry may well succeed.

    >>> err = database_unavailable("database is locked", locked=True)
    >>> err.status, err.code, err.headers
    (503, 'database_unavailable', {'retry-after': '1'})
    """
    why = (
        "its database is locked by another process" if locked else f"its database cannot be written ({cause})"
    )
    return APIError(
        503,
        f"The server cannot reach its stored responses and billing right now: {why}. "
        f"Retry in {RETRY_AFTER_S} s.",
        type="server_error",
        code="database_unavailable",
        headers={"retry-after": str(RETRY_AFTER_S)},
    )


def server_error(message: str = "The server had an error while processing your request.") -> APIError:
    return APIError(500, message, type="server_error", code="server_error")


def as_api_error(exc: BaseException) -> APIError:
    """The error a client sees for an exception escaping a response: itself, or a plain 500."""
    return exc if isinstance(exc, APIError) else server_error()
