"""Every contract between the engine and a backend, documented once where it is declared: the
clock, the lock, the event publisher, the mailer (backends.py), and the store's roles by caller
(store.py, store_api.py, store_engine.py), the values its methods take and return (store_values.py;
the due reads' filter, due_filter.py) and the names of its operations (store_operations.py).
"""
