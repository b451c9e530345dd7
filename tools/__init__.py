"""Maintenance tools of the repository (not part of the tilecraft package)."""
