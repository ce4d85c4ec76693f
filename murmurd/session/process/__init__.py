"""`inference.transport: process`: a CLI agent (Claude Code, codex) drives the task.

The CLI is spawned under the shell containment (`spawn`), reaches the capsule's tools through a
per-session loopback MCP server (`mcp_server`), and its stdout stream (`claude_events`,
`codex_events`) is read into turns, trace events and hook dispatches (`run`). `command` holds the
pure rules: the dialect, the argv, the system text, the pre-flight lookup.
"""
