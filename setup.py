"""Package build for horovod_q8: the library, its CLI and the CUDA kernel sources."""
import re
from pathlib import Path

from setuptools import find_packages, setup

# The version lives once, in horovod_q8/__init__.py.
VERSION = re.search(r'__version__ = "([^"]+)"', (Path(__file__).parent / "horovod_q8" / "__init__.py").read_text()).group(1)

setup(
    name="horovod_q8",
    version=VERSION,
    description="8-bit and 4-bit gradient and activation compression for Horovod",
    packages=find_packages(include=["horovod_q8", "horovod_q8.*"]) + ["horovod_q8.kernels", "horovod_q8.launch"],
    # The .cu and .c sources live in kernels/ at the top level and ship inside the package.
    package_dir={"horovod_q8": "horovod_q8", "horovod_q8.kernels": "kernels",
                 "horovod_q8.launch": "launch"},
    package_data={"horovod_q8.kernels": ["*.cu", "*.c", "*.h"], "horovod_q8.launch": ["*.sh", "*.sbatch", "hostfile"]},
    python_requires=">=3.9",
    install_requires=["numpy>=1.23", "numba>=0.59"],  # the fast CPU codec is the product
    extras_require={
        "tf": ["tensorflow-cpu==2.15.1", "horovod==0.28.1", "mpi4py>=3.1"],
        "cuda12": ["cupy-cuda12x>=13"],
        "cuda13": ["cupy-cuda13x>=13.6"],
        "test": ["pytest>=7.4", "pytest-timeout>=2.2"],
    },
    entry_points={"console_scripts": ["horovod-q8=horovod_q8.cli:main"]},
)
