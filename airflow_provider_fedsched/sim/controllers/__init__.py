"""Controllers of one simulated cluster; each reacts to the store's watch events."""
