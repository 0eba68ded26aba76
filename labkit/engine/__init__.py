"""The simulated GPU: tokenizer, chat template, prefix cache, decode clock, models, policies."""
