"""The cost report: the price table, pricing of stored bytes and requests, and its tables
rendered as Markdown, JSON and HTML."""
