"""tickd's engine: model, schedules, dispatcher, workers, ports and backends, metrics, config."""
