"""muster's Python package: what PyTorch workers need from the launcher.

``import muster.torch`` gives a training script torch.distributed on musterd's
Store (no worker hosts a TCPStore) and in-place recovery under
``muster --recovery=in-place``: after a lost node or a newcomer the same
processes go on in the next round (docs/migrating-from-torchrun.md).

The package needs Python's standard library only; muster.torch needs torch
as well. Every worker that muster starts can import it, a virtual
environment's included: the launcher adds the package's own directory (which
holds nothing else) to PYTHONPATH when the interpreter does not find an
installed one.
"""

__all__ = ["__version__"]

# The project's version (CMakeLists.txt project(VERSION)); python/CMakeLists.txt
# checks that they agree.
__version__ = "0.1.0"
