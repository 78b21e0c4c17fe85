"""Handlers shipped with tickd. Each imports only `scheduler.handler_api`."""
