"""Shared pieces of murmurd's bundled native tools (standard library only): the stdin/stdout
protocol of upstream's native tools (default-artifacts §2.2), the test-output parsers (§2.3) and
the code-graph database (§2.4). Laid down with each tool into its one-file zipapp."""
