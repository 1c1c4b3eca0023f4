"""The one registry of implementations: what ``run``, ``list impls``, the latency suite and its report read.

Where entries come from, in this order (a later source cannot shadow an earlier name):

1. the project's own packages, :data:`BUILTIN_PACKAGES`: each module lists its entries
   in a module-level ``IMPLEMENTATIONS`` (a tuple of :class:`Entry`);
2. installed distributions' entry points of the group :data:`ENTRY_POINT_GROUP`
   (``sampcheck.impls``): the entry point's name is the implementation's name and its
   object an implementation class (or any callable taking no argument that returns an
   implementation), or a tuple of :class:`Entry` (a package with several);
3. on demand, a spec ``package.module:Class`` (``sampcheck run --impl pkg.mod:Class``):
   imported, called with no argument; it is not listed.

An entry point that fails to load is listed (:func:`entries`) with the reason, and
creating it raises :class:`ImplLoadError`: one broken plug-in never hides the others.
What an implementation declares (features, devices, stages, roles) is read from the
object itself (:mod:`impls.base`, ``Implementation``; ``docs/adapters.md``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["Entry", "ImplLoadError", "ENTRY_POINT_GROUP", "BUILTIN_PACKAGES", "entries", "names", "create",
           "entry", "roles_of", "cli_options", "load_spec"]

#: The entry-point group third-party implementations register under.
ENTRY_POINT_GROUP = "sampcheck.impls"
#: The project's own implementation packages, in the order ``list impls`` shows them.
BUILTIN_PACKAGES = ("impls.reference", "impls.transformers", "impls.fused", "impls.flashinfer", "impls.vllm",
                    "impls.vllm_gpu", "impls.trtllm", "impls.llamacpp", "impls.sglang", "impls.sglang_gpu", "impls.peers", "impls.reference.latency")


class ImplLoadError(Exception):
    """An implementation that cannot be loaded or built (the message names it and says why)."""


@dataclass(frozen=True)
class Entry:
    """One registered implementation.

    Attributes
    ----------
    name : str
        The name users pass to ``--impl``; the built object's ``name`` must equal it.
    factory : callable
        Takes no argument, returns the implementation (cheap: engines import lazily).
    origin : str
        Where it was registered: the package, ``entry point NAME (DIST VERSION)``, or the spec.
    problem : str or None
        Why an entry point did not load (then :meth:`create` raises).
    """

    name: str
    factory: Optional[Callable[[], object]]
    origin: str = ""
    problem: Optional[str] = None

    def create(self):
        """Build the implementation.

        Raises
        ------
        ImplLoadError
            The entry did not load, the factory raised, or the object's ``name`` is not
            the entry's.
        """
        if self.problem is not None:
            raise ImplLoadError(f"implementation {self.name!r} ({self.origin}) cannot be loaded: {self.problem}")
        try:
            impl = self.factory()
        except Exception as e:
            raise ImplLoadError(f"implementation {self.name!r} ({self.origin}): building it raised "
                                f"{type(e).__name__}: {e}") from e
        got = getattr(impl, "name", None)
        if got != self.name:
            raise ImplLoadError(f"implementation {self.name!r} ({self.origin}): the object's name is {got!r}; it "
                                "must equal the name it is registered under (the entry point's name)")
        return impl


def _entry_point_entries() -> list:
    from importlib import metadata
    out = []
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        origin = f"entry point {ep.name} ({dist.name} {dist.version})" if dist is not None else f"entry point {ep.name}"
        try:
            obj = ep.load()
        except Exception as e:
            out.append(Entry(ep.name, None, origin, f"{ep.value}: {type(e).__name__}: {e}"))
            continue
        if isinstance(obj, (tuple, list)):
            bad = [x for x in obj if not isinstance(x, Entry)]
            if bad:
                out.append(Entry(ep.name, None, origin, f"{ep.value}: a list of entries holds {type(bad[0]).__name__}"))
                continue
            out.extend(Entry(x.name, x.factory, f"{origin}: {x.origin or ep.value}") for x in obj)
        elif callable(obj):
            out.append(Entry(ep.name, obj, origin))
        else:
            out.append(Entry(ep.name, None, origin, f"{ep.value} is a {type(obj).__name__}, not a class, a "
                                                    "callable or a tuple of impls.registry.Entry"))
    return out


_CACHE: dict = {}


def entries() -> list:
    """Every registered :class:`Entry`, built-ins first (in :data:`BUILTIN_PACKAGES` order), then entry points.

    Raises
    ------
    ImportError
        When a built-in package does not import (a broken checkout, not a missing engine:
        those import lazily).
    """
    if "all" not in _CACHE:
        out = []
        for mod in BUILTIN_PACKAGES:
            for e in importlib.import_module(mod).IMPLEMENTATIONS:
                out.append(Entry(e.name, e.factory, e.origin or mod))
        known = {e.name: e for e in out}
        for e in _entry_point_entries():
            if e.name in known:
                # listed once, under the first registration; the clash is that entry point's problem
                e = Entry(f"{e.name} [{e.origin}]", None, e.origin,
                          f"the name {e.name!r} is already registered ({known[e.name].origin})")
            known.setdefault(e.name, e)
            out.append(e)
        _CACHE["all"] = out
    return list(_CACHE["all"])


def roles_of(impl) -> frozenset:
    """The roles (:data:`impls.base.ROLES`) an implementation declares (default ``{"conformance"}``)."""
    return frozenset(getattr(impl, "roles", None) or ("conformance",))


def names(role: Optional[str] = None) -> list:
    """Registered names, in registry order; with ``role``, only the entries that declare it.

    Entries that do not load are listed only without ``role``.
    """
    if role is None:
        return [e.name for e in entries()]
    out = []
    for e in entries():
        try:
            if role in roles_of(e.create()):
                out.append(e.name)
        except ImplLoadError:
            continue
    return out


def entry(name: str) -> Entry:
    """The entry called ``name``.

    Raises
    ------
    KeyError
        Unknown name; the message lists the known ones and the ``module:Class`` form.
    """
    for e in entries():
        if e.name == name:
            return e
    import difflib
    near = difflib.get_close_matches(name, names(), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(n) for n in near)}? " if near else ""
    raise KeyError(f"unknown implementation {name!r}; {hint}known: {', '.join(names())} (or give a class as "
                   "'package.module:Class')")


def load_spec(spec: str) -> Entry:
    """The :class:`Entry` of a ``package.module:Class`` spec (imported now).

    Raises
    ------
    ImplLoadError
        The module does not import or has no such attribute (the message says which).
    """
    import os
    import sys
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ImplLoadError(f"{spec!r}: expected 'package.module:Class'")
    # a module in the folder the command runs from imports, as with 'python -m' (worker processes
    # inherit this path)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:
        raise ImplLoadError(f"{spec}: module {mod_name!r} does not import: {type(e).__name__}: {e} (it must be "
                            "importable: in the folder you run from, or on PYTHONPATH)") from e
    obj = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImplLoadError(f"{spec}: {mod_name} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ImplLoadError(f"{spec}: {attr} is a {type(obj).__name__}, not a class or callable")
    try:
        name = getattr(obj, "name", None) if isinstance(getattr(obj, "name", None), str) else obj().name
    except Exception as e:
        raise ImplLoadError(f"{spec}: building it raised {type(e).__name__}: {e}") from e
    return Entry(name, obj, spec)


def create(spec: str):
    """Build the implementation named ``spec``: a registered name, or ``package.module:Class``.

    Raises
    ------
    KeyError
        An unknown name (the message lists the known ones).
    ImplLoadError
        An entry or spec that does not load or build.
    """
    if ":" in spec:
        return load_spec(spec).create()
    return entry(spec).create()


def cli_options() -> list:
    """Every :class:`impls.base.CliOption` that a registered implementation declares (class attribute ``cli_options``).

    Read from the class (the factory when it is a class), so nothing is built; entries
    that do not load are skipped.
    """
    out, seen = [], set()
    for e in entries():
        for opt in getattr(e.factory, "cli_options", ()) if e.factory is not None else ():
            if opt.flag not in seen:
                seen.add(opt.flag)
                out.append(opt)
    return out
