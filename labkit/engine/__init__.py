"""The simulated GPU: chat template, prefix cache, decode clock, models, policies.

The tokenizer they count with is ``labkit.text``'s, shared with the client.
"""
