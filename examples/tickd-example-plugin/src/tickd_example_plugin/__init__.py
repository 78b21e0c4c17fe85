"""An example tickd plug-in: see README.md, and docs/writing-handlers.md in tickd."""
