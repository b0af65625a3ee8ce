"""Ship the repository's data with the package: a wheel carries configs/, the problem sets and the
system tuning database under instance_factory/data/, where the code looks when no checkout is
around it (an editable install reads the top-level folders directly)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = {  # destination under instance_factory/data -> (source folder, patterns)
    "configs": ("configs", ("*.yaml",)),
    "problem_sets": ("configs/problem_sets", ("*.yaml",)),
    "tuning_db": ("tuning_db", ("*.csv.gz", "*.csv", "*.md")),
}


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        for dest, (src, patterns) in DATA.items():
            target = Path(self.build_lib) / "instance_factory" / "data" / dest
            target.mkdir(parents=True, exist_ok=True)
            for pattern in patterns:
                for f in sorted((ROOT / src).glob(pattern)):
                    shutil.copy2(f, target / f.name)


setup(cmdclass={"build_py": BuildPyWithData})
