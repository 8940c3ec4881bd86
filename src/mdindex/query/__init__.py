"""The read side: how the CLI, `mdindex mcp` and the Python API ask an index,
through the daemon when one holds the store or opened here (``client``); the
status fields (``status``), links and tags (``links``), `mdindex eval`
(``evaluate``) and the MCP tools (``mcp_server``). Below the daemon, which
answers with the same code."""
