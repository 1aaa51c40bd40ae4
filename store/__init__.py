"""The only writer of the database, and its read side."""
