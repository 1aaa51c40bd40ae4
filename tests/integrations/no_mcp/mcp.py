"""Shadows the MCP SDK in a test: as if `memq[mcp]` were not installed."""

raise ImportError("No module named 'mcp'")
