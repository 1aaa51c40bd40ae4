"""The writer: inbox entries in, one transaction per batch, acknowledged after commit."""
