"""Compatibility shims for code written against other fusion frontends."""
