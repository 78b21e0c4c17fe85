"""Jobs tickd creates at boot: system jobs always, demo jobs for `make run`."""
