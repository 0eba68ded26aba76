"""The API service: Starlette app, stores, connection cache, and the turn that ties them together."""
