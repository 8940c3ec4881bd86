"""The `mdindex watch` daemon: startup, a main loop, shutdown."""
