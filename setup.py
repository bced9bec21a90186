"""Packaging. ``compat/`` lives at the top of the repository (the design card) and is installed as
``ptdbg_ascend.compat``. torch is a prerequisite and deliberately not in install_requires: pip must
never replace a user's own (CUDA / Ascend) torch build."""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(HERE, "ptdbg_ascend", "version.py"), encoding="utf-8") as handle:
        return re.search(r'__version__ = "([^"]+)"', handle.read()).group(1)


core_packages = find_packages(include=["ptdbg_ascend", "ptdbg_ascend.*"])
compat_packages = ["ptdbg_ascend.compat" + sub[len("compat"):] for sub in find_packages(include=["compat", "compat.*"])]

setup(
    name="ptdbg_ascend",
    version=_version(),
    description="PyTorch accuracy debugger: dump every API call, compare two runs, find the first API that differs",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=core_packages + compat_packages,
    package_dir={"ptdbg_ascend.compat": "compat"},
    package_data={"ptdbg_ascend": ["dump/*.txt", "dump/*.yaml"]},
    # No pandas: the compare side reads npy with numpy and writes its tables with csv/openpyxl, and must
    # stay light to import (a compare script never imports torch or pandas). The tests read reports with
    # pandas, as users do.
    install_requires=["numpy>=1.19", "openpyxl>=3.0", "tqdm>=4.40"],
    # transformers: real small models (GPT-NeoX from a config, random init) for the module-dump tests only.
    extras_require={"test": ["pytest>=7", "pandas>=1.1", "transformers>=4.30"], "migrate": ["libcst>=0.4"]},
    entry_points={"console_scripts": ["ptdbg=ptdbg_ascend.cli:main"]},
)
