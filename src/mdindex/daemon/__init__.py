"""`mdindex watch`: startup, a main loop and shutdown (`service`), the watcher,
builds of new versions, health, the API over HTTP and MCP, and notify. What it
answers is computed by the read side below it (``mdindex.query``)."""
