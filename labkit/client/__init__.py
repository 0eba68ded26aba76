"""The agent side: tools over a sandbox repository, transports, the agent loop, client spans."""
