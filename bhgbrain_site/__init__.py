"""BHGBrain for Django: project package (settings, config, errors, HTTP, CLI)."""
