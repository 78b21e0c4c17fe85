"""Keeping secrets out of logs, events, execution records and API responses: masking by name
(masking.py), secrets in free text (text.py), and a job's own secrets as a far end may echo them
back, encoded (echoes.py).
"""
