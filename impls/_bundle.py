"""Source bundles: a few Python files of an engine's wheel, copied out with a manifest of SHA-256s.

Some engines' GPU sampling code is pure Python (+ Triton, or calls into FlashInfer) inside
wheels that cannot be installed on the project's GPU machine (no network, missing
dependencies, another Python). A *bundle* is a folder holding **only** the files an adapter
executes or reads, each copied from an installed distribution (its ``site-packages``) or
from a wheel file, each checked against that distribution's own ``RECORD`` (the wheel's
``path,sha256=<urlsafe b64>,size`` list: a file edited after installation is refused), and
a ``MANIFEST.json`` recording per file its path, distribution, use and SHA-256. The
adapter's loader calls :func:`verify` before executing anything, so a modified file is
never run. Nothing of the engine is vendored in the project: a bundle is a build output
(kept under the git-ignored ``.whl/``).

One bundle may take files from several distributions (SGLang's sampler and the
``sgl_kernel`` package of ``sglang-kernel``): one :class:`Spec` per importable package.
Used by :mod:`impls.vllm_gpu.bundle` and :mod:`impls.sglang_gpu.bundle`.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["Spec", "BundleError", "MANIFEST", "SCHEMA", "make_bundle", "read_manifest", "verify", "find_source",
           "summary", "locate", "shown_path"]

#: The manifest's file name, at the bundle's root.
MANIFEST = "MANIFEST.json"
#: The manifest's schema version.
SCHEMA = 1


class BundleError(Exception):
    """A bundle (or a source to build one from) that cannot be used; the message says why and what to run."""


@dataclass(frozen=True)
class Spec:
    """The files a bundle takes from one importable package of one distribution.

    Attributes
    ----------
    package : str
        The top-level import package, also the folder the files keep in the bundle
        (``"vllm"``, ``"sglang"``, ``"sgl_kernel"``).
    loaded : dict
        Path relative to the package -> why it is executed (in load order).
    read : dict
        Path relative to the package -> what is read from it without executing it whole
        (literals by ``ast.literal_eval``, or named class definitions).
    what : str
        How messages name the distribution (``"vLLM"``, ``"SGLang"``).
    tool : str
        The command that rebuilds the bundle (``"python -m impls.vllm_gpu.bundle"``).
    """

    package: str
    loaded: dict
    read: dict = field(default_factory=dict)
    what: str = ""
    tool: str = ""

    @property
    def files(self) -> tuple:
        """Every file of the package in a bundle, relative to the package (loaded first, in order)."""
        return (*self.loaded, *self.read)

    def use(self, rel: str) -> str:
        """``"loaded"`` or ``"read"``."""
        return "loaded" if rel in self.loaded else "read"

    def why(self, rel: str) -> str:
        """What the file is taken for."""
        return self.loaded.get(rel) or self.read[rel]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_hash(entry: str) -> Optional[str]:
    # RECORD's "sha256=<urlsafe base64, no padding>" -> hex
    if not entry.startswith("sha256="):
        return None
    b64 = entry[len("sha256="):]
    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()


def _parse_record(text: str) -> dict:
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[0]:
            out[row[0]] = _record_hash(row[1])
    return out


class _Source:
    """Where one package's files come from: a ``site-packages`` folder or a wheel, with its RECORD and metadata.

    Raises
    ------
    BundleError
        The place holds no such package, or no ``.dist-info`` with a RECORD for it.
    """

    def __init__(self, where: Path, spec: Spec):
        self.where, self.spec = where, spec
        pkg = spec.package
        if where.is_file() and where.suffix == ".whl":
            self.zip = zipfile.ZipFile(where)
            names = self.zip.namelist()
            if not any(n.startswith(f"{pkg}/") for n in names):
                raise BundleError(f"{where}: a wheel without a {pkg}/ package")
            infos = [n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            if not infos:
                raise BundleError(f"{where}: a wheel without a .dist-info/METADATA")
            self.dist_info = infos[0].split("/")[0]
            self.record = _parse_record(self.zip.read(f"{self.dist_info}/RECORD").decode("utf-8"))
            self.metadata = self.zip.read(infos[0]).decode("utf-8", "replace")
            return
        self.zip = None
        root = where.parent if where.name == pkg and (where / "__init__.py").is_file() else where
        if not (root / pkg / "__init__.py").is_file():
            raise BundleError(f"{where}: no {pkg} package there (give the site-packages folder that holds "
                              f"{pkg}/, the {pkg}/ folder itself, or a {spec.what or pkg} wheel)")
        self.root = root
        infos = []
        for p in sorted(root.glob("*.dist-info")):
            rec = p / "RECORD"
            if rec.is_file() and any(line.startswith(f"{pkg}/") for line in rec.read_text("utf-8").splitlines()):
                infos.append(p)
        if not infos:
            raise BundleError(f"{root}: {pkg}/ has no .dist-info with a RECORD (install it with pip, or build from "
                              "the wheel file)")
        self.dist_info = infos[0].name
        self.record = _parse_record((infos[0] / "RECORD").read_text("utf-8"))
        self.metadata = (infos[0] / "METADATA").read_text("utf-8", "replace")

    def field(self, name: str) -> str:
        """A field of the distribution's METADATA (``Name``, ``Version``), or ``"unknown"``."""
        for line in self.metadata.splitlines():
            if line.startswith(f"{name}: "):
                return line[len(name) + 2:].strip()
        return "unknown"

    def read(self, rel: str) -> bytes:
        """The bytes of ``<package>/rel``.

        Raises
        ------
        BundleError
            The file is not there (the message lists every file the bundle needs).
        """
        pkg = self.spec.package
        path = f"{pkg}/{rel}"
        try:
            return self.zip.read(path) if self.zip is not None else (self.root / path).read_bytes()
        except (KeyError, FileNotFoundError):
            raise BundleError(f"{self.where}: {pkg}/{rel} is missing (sampcheck needs {', '.join(self.spec.files)} "
                              f"under {pkg}/)") from None


def find_source(package: str) -> Optional[Path]:
    """The ``site-packages`` folder of an importable ``package`` (found without importing it), or None."""
    import importlib.util
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent.parent


def _holds(where: Path, package: str) -> bool:
    if where.is_file() and where.suffix == ".whl":
        try:
            with zipfile.ZipFile(where) as z:
                return any(n.startswith(f"{package}/") for n in z.namelist())
        except zipfile.BadZipFile:
            return False
    root = where.parent if where.name == package else where
    return (root / package / "__init__.py").is_file()


def make_bundle(out, specs: Sequence[Spec], sources: Sequence) -> dict:
    """Copy every :class:`Spec`'s files from the source holding its package into ``out``; write the manifest.

    Parameters
    ----------
    out : path-like
        The bundle's folder (created; its package folders and manifest are replaced).
    specs : sequence of Spec
        One per package; the first names the bundle (``distribution``, ``version``).
    sources : sequence of path-like
        ``site-packages`` folders, package folders or wheel files; each spec takes the first
        one that holds its package (a single source is used for every spec).

    Returns
    -------
    dict
        The manifest written: ``schema``, ``distribution``, ``version``, ``source``, ``dist_info``
        (of the first spec), ``distributions`` (one entry per spec: ``package``, ``name``,
        ``version``, ``dist_info``, ``source``), ``record_verified`` and ``files``
        (``<package>/<rel>`` -> ``sha256``, ``bytes``, ``use``, ``why``, ``distribution``).

    Raises
    ------
    BundleError
        No source holds a package, a file is missing, or a file's SHA-256 differs from its
        distribution's RECORD (an edited installation).
    """
    paths = [Path(s).expanduser().resolve() for s in sources]
    out = Path(out)
    files, dists = {}, []
    for spec in specs:
        where = paths[0] if len(paths) == 1 else next((p for p in paths if _holds(p, spec.package)), None)
        if where is None:
            raise BundleError(f"none of {', '.join(map(str, paths))} holds the {spec.package} package (give its "
                              f"site-packages folder or its {spec.what or spec.package} wheel with --from)")
        src = _Source(where, spec)
        name = src.field("Name")
        for rel in spec.files:
            data = src.read(rel)
            digest = _sha256(data)
            key = f"{spec.package}/{rel}"
            recorded = src.record.get(key)
            if recorded is None:
                raise BundleError(f"{src.where}: {key} is not in {src.dist_info}/RECORD: not a file of that wheel")
            if recorded != digest:
                raise BundleError(f"{src.where}: {key} has sha256 {digest}, but {src.dist_info}/RECORD says "
                                  f"{recorded}: the installed file was edited; reinstall {spec.what or name} or "
                                  "build from the wheel")
            dest = out / spec.package / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            files[key] = {"sha256": digest, "bytes": len(data), "use": spec.use(rel), "why": spec.why(rel),
                          "distribution": name}
        dists.append({"package": spec.package, "name": name, "version": src.field("Version"),
                      "dist_info": src.dist_info, "source": str(src.where)})
    first = dists[0]
    manifest = {"schema": SCHEMA, "distribution": first["name"], "version": first["version"],
                "source": first["source"], "dist_info": first["dist_info"], "distributions": dists,
                "record_verified": True, "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def read_manifest(root, tool: str, what: str) -> dict:
    """The manifest of the bundle at ``root``.

    Parameters
    ----------
    root : path-like
    tool : str
        The command that builds such a bundle (named in the messages).
    what : str
        What to build it from (named in the messages).

    Raises
    ------
    BundleError
        No such folder, no manifest, or a manifest that does not parse, lacks a field or has
        another schema.
    """
    root = Path(root)
    if not root.is_dir():
        raise BundleError(f"{root}: no such bundle folder (build it with: {tool} --out {root} --from <{what}>)")
    f = root / MANIFEST
    if not f.is_file():
        raise BundleError(f"{root}: no {MANIFEST} (not a bundle of {tool})")
    try:
        m = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BundleError(f"{f}: unreadable manifest ({e})") from None
    for key in ("schema", "distribution", "version", "files"):
        if key not in m:
            raise BundleError(f"{f}: the manifest has no {key!r}")
    if m["schema"] != SCHEMA:
        raise BundleError(f"{f}: manifest schema {m['schema']!r}; this sampcheck reads schema {SCHEMA} (rebuild it)")
    return m


def verify(root, specs: Sequence[Spec], what: str) -> dict:
    """Check the bundle at ``root`` against its manifest; return the manifest.

    Every file of every spec must be listed, present, and have the listed SHA-256.

    Parameters
    ----------
    root : path-like
    specs : sequence of Spec
        The first one's ``tool`` is named in the messages.
    what : str
        What a bundle is built from (for the message of a missing bundle).

    Raises
    ------
    BundleError
        Naming every file that is unlisted, missing or modified (with both hashes).
    """
    root = Path(root)
    tool = specs[0].tool
    m = read_manifest(root, tool, what)
    problems = []
    for spec in specs:
        for rel in spec.files:
            key = f"{spec.package}/{rel}"
            entry = m["files"].get(key)
            path = root / key
            if entry is None:
                problems.append(f"{key} is not in the manifest")
            elif not path.is_file():
                problems.append(f"{key} is missing")
            else:
                got = _sha256(path.read_bytes())
                if got != entry.get("sha256"):
                    problems.append(f"{key} was modified: sha256 {got}, manifest {entry.get('sha256')}")
    if problems:
        raise BundleError(f"{root}: the bundle does not match its {MANIFEST} ({m['distribution']} {m['version']}): "
                          + "; ".join(problems) + f" — rebuild it with {tool}")
    return m


def summary(out, m: dict) -> str:
    """The lines ``python -m impls.<engine>.bundle`` prints for a manifest it wrote."""
    size = sum(f["bytes"] for f in m["files"].values())
    dists = m.get("distributions") or [{"name": m["distribution"], "version": m["version"],
                                        "dist_info": m.get("dist_info", "?")}]
    names = ", ".join(f"{d['name']} {d['version']}" for d in dists)
    records = ", ".join(f"{d['dist_info']}/RECORD" for d in dists)
    lines = [f"{out}: {len(m['files'])} files of {names} ({size} bytes), checked against {records}"]
    lines += [f"  {f['sha256'][:16]}  {k}" for k, f in m["files"].items()]
    return "\n".join(lines)


def locate(path: Optional[str], env_var: str, default: str) -> Path:
    """The bundle folder to load: ``path``, else ``$env_var``, else ``default`` (e.g. ``.whl/vllm-src``)
    under the working directory, else under the checkout this package runs from.

    Returns the first default candidate that holds a :data:`MANIFEST`, or the first candidate
    (loading it then raises :class:`BundleError` with the command that builds it). Never raises.
    """
    given = path or os.environ.get(env_var) or None
    if given:
        return Path(given).expanduser()
    candidates = [Path.cwd() / default, Path(__file__).resolve().parents[1] / default]
    for c in candidates:
        if (c / MANIFEST).is_file():
            return c
    return candidates[0]


def shown_path(root) -> str:
    """How results name a bundle folder: relative to the working directory when inside it
    (``.whl/vllm-src``), else its folder name only, so that records never carry a machine's
    absolute paths."""
    root = Path(root)
    try:
        return str(root.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return root.name
