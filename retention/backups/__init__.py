"""Backups: the ``.bhgb`` file format, creating one, restoring one."""
