"""HTTP interfaces of tickd (aiohttp)."""
