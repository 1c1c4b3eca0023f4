"""Implementations under test, behind one protocol (:mod:`impls.base`), in one registry (:mod:`impls.registry`).

Each engine's package is self-contained (``impls/<engine>/``) and lists its entries in
``IMPLEMENTATIONS``; adapters import their engine lazily, so that a missing engine is a
``skip`` with a reason, never an import error. Third-party implementations register
through the ``sampcheck.impls`` entry-point group (``docs/adapters.md``).
"""
