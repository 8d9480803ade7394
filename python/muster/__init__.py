"""muster's Python package: what PyTorch workers need from the launcher.

``import muster.torch`` gives a training script torch.distributed on musterd's
Store (no worker hosts a TCPStore) and in-place recovery under
``muster --recovery=in-place``: after a lost node or a newcomer the same
processes go on in the next round (docs/migrating-from-torchrun.md).

The package depends on torch (for muster.torch only) and grpcio/protobuf
(Debian: python3-torch, python3-grpcio, python3-protobuf). Every worker that
muster starts can import it: the launcher adds the package's directory to
PYTHONPATH when the interpreter does not find an installed one.
"""
