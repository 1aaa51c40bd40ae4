"""The read side: every query agents, the CLI and ``memq serve`` run against the database."""
