"""`mdindex watch`: startup, a main loop and shutdown (`service`), the watcher, the
API over HTTP and MCP, and the client side the CLI and `mdindex mcp` use (`client`)."""
