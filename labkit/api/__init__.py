"""Wire shapes of the Responses API, pure and I/O-free: requests, responses, events, errors."""
