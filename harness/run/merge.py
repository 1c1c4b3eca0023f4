"""``sampcheck merge``: the results of the shards of one run (``sampcheck run --shard I/N``) as one run.

Each shard's ``results.json`` records its part (``run.shard``: index, count, its case ids
in order, how many cases the whole selection had, and a digest of it). :func:`merge`
checks that the shards belong together — the same selection, corpus, implementations
(name, version, profile, device) and statistical level, every shard ``1..N`` exactly
once, no result twice — and returns one results document in the order of the unsharded
run (:func:`harness.run.shard.merged_positions`), which :func:`write` turns into
``results.json`` and ``index.html`` as ``sampcheck run`` writes them. Every problem is a
:class:`MergeError` naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from harness.corpus.load import CASES_DIR, CaseError, load_case

from .journal import atomic_write, valid_result
from .runner import RESULTS_SCHEMA
from .shard import merged_positions

__all__ = ["MergeError", "load_shard", "merge", "write"]

#: ``run`` fields every shard must share (the declared corpus and its statistical level).
_SHARED_RUN = ("alpha_per_check", "statistical_checks_in_corpus", "cases_declared")
#: ``run.impls.<name>`` fields every shard must share.
_SHARED_IMPL = ("version", "profile", "device", "is_prediction")


class MergeError(ValueError):
    """Shards that cannot be merged: ``path`` (the file at fault) and ``problem`` (one line)."""

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}")


def load_shard(path) -> tuple:
    """``(file, document)`` of a shard's results: ``path`` is its ``results.json`` or the folder holding it.

    Raises
    ------
    MergeError
        Missing, unreadable, not JSON, not a results document of schema 1, or not a shard.
    """
    p = Path(path)
    f = p / "results.json" if p.is_dir() else p
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MergeError(f, "no such file" + (" (the shard has not finished: its folder has no results.json)"
                                              if p.is_dir() else "")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise MergeError(f, f"cannot be read: {getattr(e, 'strerror', None) or e}") from None
    except json.JSONDecodeError as e:
        raise MergeError(f, f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("run"), dict) or not isinstance(doc.get("results"), list):
        raise MergeError(f, "not the results.json of a run (no 'run' object and 'results' list)")
    if doc.get("schema") != RESULTS_SCHEMA:
        raise MergeError(f, f"results schema {doc.get('schema')!r}, this sampcheck reads {RESULTS_SCHEMA}")
    sh = doc["run"].get("shard")
    if not isinstance(sh, dict):
        raise MergeError(f, "not a shard (written without --shard): there is nothing to merge it with")
    for key, typ in (("index", int), ("count", int), ("cases", list), ("selected", int), ("selection_sha256", str)):
        if not isinstance(sh.get(key), typ):
            raise MergeError(f, f"run.shard.{key} is missing or not a {typ.__name__}")
    for n, r in enumerate(doc["results"]):
        why = valid_result(r)
        if why:
            raise MergeError(f, f"results[{n}]: {why}")
    return f, doc


def _check_together(shards: list) -> int:
    """The shard count ``N``, once every shard is found to belong with the first."""
    (f0, d0) = shards[0]
    run0, sh0 = d0["run"], d0["run"]["shard"]
    count = sh0["count"]
    seen = {}
    for f, d in shards:
        run, sh = d["run"], d["run"]["shard"]
        if sh["count"] != count:
            raise MergeError(f, f"shard {sh['index']}/{sh['count']}, but {f0} is shard {sh0['index']}/{count}: "
                                "merge the shards of one split")
        if sh["index"] in seen:
            raise MergeError(f, f"shard {sh['index']}/{count} is given twice (also {seen[sh['index']]})")
        seen[sh["index"]] = f
        if (sh["selected"], sh["selection_sha256"]) != (sh0["selected"], sh0["selection_sha256"]):
            raise MergeError(f, f"its run selected other cases ({sh['selected']}) than {f0}'s ({sh0['selected']}): "
                                "shards must run the same --cases on the same corpus")
        for key in _SHARED_RUN:
            if run.get(key) != run0.get(key):
                raise MergeError(f, f"run.{key} is {run.get(key)!r}, {f0} has {run0.get(key)!r}: the shards ran "
                                    "different corpora")
        if list(run.get("impls", {})) != list(run0.get("impls", {})):
            raise MergeError(f, f"implementations {list(run.get('impls', {}))}, {f0} has {list(run0.get('impls', {}))}")
        for name, meta in run["impls"].items():
            for key in _SHARED_IMPL:
                if meta.get(key) != run0["impls"][name].get(key):
                    raise MergeError(f, f"{name}: {key} {meta.get(key)!r}, {f0} has {run0['impls'][name].get(key)!r}: "
                                        "every shard must run the same implementations")
        want = len(range(sh["index"] - 1, sh["selected"], count))
        if len(sh["cases"]) != want:
            raise MergeError(f, f"shard {sh['index']}/{count} of {sh['selected']} cases should hold {want}, it "
                                f"holds {len(sh['cases'])}")
    missing = [i for i in range(1, count + 1) if i not in seen]
    if missing:
        raise MergeError(f0, f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing (given: "
                             f"{', '.join(f'{i}/{count}' for i in sorted(seen))})")
    return count


def merge(paths: list) -> dict:
    """Merge the shards at ``paths`` (their results.json, or folders holding it) into one results document.

    Returns
    -------
    dict
        A results.json document (schema 1) equal to the unsharded run's but for times and
        hosts: ``run.started`` the earliest start, ``run.finished`` the latest end,
        ``run.merged_from`` one entry per shard (``file``, ``shard``, ``host``, ``started``,
        ``finished``), ``worker_restarts`` summed; results in the unsharded order.

    Raises
    ------
    MergeError
        A shard that does not load, or shards that do not belong together.
    """
    if not paths:
        raise MergeError("sampcheck merge", "give the results of every shard (results.json files or their folders)")
    shards = [load_shard(p) for p in paths]
    count = _check_together(shards)
    total = shards[0][1]["run"]["shard"]["selected"]
    order: list = [None] * total
    by_pair: dict = {}
    for f, d in shards:
        sh = d["run"]["shard"]
        by_case: dict = {}
        for r in d["results"]:
            key = (r["case"], r["impl"])
            if key in by_pair:
                raise MergeError(f, f"a second result for {r['case']} on {r['impl']} (also in {by_pair[key]})")
            by_pair[key] = f
            by_case.setdefault(r["case"], []).append(r)
        extra = set(by_case) - set(sh["cases"])
        if extra:
            raise MergeError(f, f"results for case(s) outside the shard: {', '.join(sorted(extra)[:5])}")
        for pos, cid in zip(merged_positions(sh["index"], count, len(sh["cases"])), sh["cases"]):
            order[pos] = by_case.get(cid, [])
    run0 = shards[0][1]["run"]
    impls = {name: {k: v for k, v in meta.items() if k != "worker_restarts"} for name, meta in run0["impls"].items()}
    for name in impls:
        restarts = sum(d["run"]["impls"][name].get("worker_restarts", 0) for _f, d in shards)
        if restarts:
            impls[name]["worker_restarts"] = restarts
    run = {k: v for k, v in run0.items() if k not in ("shard", "resume", "impls")}
    run.update({"started": min(d["run"]["started"] for _f, d in shards),
                "finished": max(d["run"]["finished"] for _f, d in shards),
                "impls": impls, "cases_selected": total,
                "merged_from": [{"file": str(f), "shard": f"{d['run']['shard']['index']}/{count}",
                                 "host": d["run"].get("host"), "started": d["run"]["started"],
                                 "finished": d["run"]["finished"]}
                                for f, d in sorted(shards, key=lambda s: s[1]["run"]["shard"]["index"])]})
    return {"schema": RESULTS_SCHEMA, "run": run, "results": [r for rs in order for r in rs]}


def _profiles(doc: dict) -> list:
    """The profiles of the merged run's implementations, for the report's profile table."""
    from impls import registry
    from impls.profiles import get_profile
    out = []
    for name, meta in doc["run"]["impls"].items():
        try:
            out.append(registry.create(meta.get("spec") or name).profile)
            continue
        except Exception:  # an implementation this checkout cannot build: its profile by name
            pass
        try:
            out.append(get_profile(meta.get("profile", "")))
        except KeyError:
            continue
    return out


def _cases(doc: dict, root: Path) -> dict:
    """The case files of the results, from the corpus at ``root`` (a file that does not load: its error)."""
    cases = {}
    for cid in dict.fromkeys(r["case"] for r in doc["results"]):
        path = Path(root) / f"{cid}.toml"
        try:
            cases[cid] = load_case(path, root)
        except (CaseError, OSError) as e:
            cases[cid] = {"id": cid, "error": str(e), "path": str(path)}
    return cases


def write(doc: dict, out_dir: Path, root: Optional[Path] = None) -> tuple:
    """Write the merged ``results.json`` and ``index.html`` into ``out_dir`` (created); returns their paths.

    The report reads the case files from the corpus at ``root`` (default: the corpus ``sampcheck
    run`` reads).
    """
    from harness.report.html import write_html
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = atomic_write(out_dir / "results.json", json.dumps(doc, indent=1) + "\n")
    html_path = out_dir / "index.html"
    tmp = html_path.with_name(html_path.name + ".tmp")
    write_html(doc, _cases(doc, root or CASES_DIR), _profiles(doc), tmp)
    os.replace(tmp, html_path)
    return results_path, html_path
