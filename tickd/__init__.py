"""tickd's composition root: the command line (cli.py), the wiring of settings, backends,
resources, engine, API and seeds (app.py) and the daemon's life (daemon.py). The only package that
imports every layer; nothing imports it."""
