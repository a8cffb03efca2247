"""attnlab's Hydra sweeper (a plugin must live under `hydra_plugins` for Hydra to load it)."""
