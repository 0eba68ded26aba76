"""What the server keeps: the SQLite file (``database``; where it lives by default: ``datadir``),
the response store (``store``), the billing ledger (``billing``), and the traces (``traces``), their
live stream to subscribers (``trace_stream``) and, with ``--workers``, their table shared by every
worker (``shared_traces``).

It imports nothing else of the server.
"""
