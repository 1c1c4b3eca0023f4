"""Build hook: the wheel carries the corpus and the golden files as package data.

``cases/`` (the case files, ``findings.toml``, ``features.txt``) and ``golden/`` (the reference's
predictions per profile, the engines' run records) are copied into the built package as
``harness/_data/cases`` and ``harness/_data/golden``, so that an installed sampcheck (``pip install
sampcheck``, not editable) runs the corpus from any folder; ``harness/corpus/paths.py`` finds them
there when neither ``SAMPCHECK_CASES`` / ``SAMPCHECK_GOLDEN``, the working directory nor a checkout
holds them. An editable install reads the checkout's own folders, so nothing is copied for it. The
metadata is in pyproject.toml; MANIFEST.in puts both folders in the sdist.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

#: The project folders shipped as package data, and where they go in the package.
DATA = ("cases", "golden")
DEST = Path("harness") / "_data"


class BuildPyWithData(build_py):
    """``build_py``, then the corpus and the golden files copied under ``harness/_data/``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        here = Path(__file__).resolve().parent
        for name in DATA:
            src = here / name
            if not src.is_dir():
                raise SystemExit(f"setup.py: {src} is missing: the wheel must carry it (is MANIFEST.in intact?)")
            dst = Path(self.build_lib) / DEST / name
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.tmp"))


setup(cmdclass={"build_py": BuildPyWithData})
