"""The model's text as every side counts it: the tokenizer, and text of an exact number of tokens.

A real client counts tokens with the model's tokenizer too (tiktoken is public), so the client,
the engine, the server, the scenarios and the analysis all read it here; it imports nothing
else of labkit.
"""
