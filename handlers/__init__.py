"""Handlers shipped with tickd. Each imports only `scheduler.plugin.api`."""
