"""The MCP server: the same index, namespaces and cited evidence as tools for any agent."""
