"""Kiln's trainer side: the `kiln` backend of torch.compile (kiln.backend), its settings,
the compile client, and the capture of AOTAutograd graphs into Kiln's graph format.

Importing this package needs nothing but the standard library; the parts that need PyTorch,
grpcio or protobuf import them when they are used. Where PyTorch is installed, importing
the package also registers the backend, so `import kiln` is enough for
torch.compile(backend="kiln") without installing the package.
"""

import importlib.util
import pkgutil
import sys

# The generated kiln.v1 modules may live in another folder named kiln on the path (a build
# tree); they join this package.
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.1.0"


def _register_with_dynamo() -> None:
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return
    from kiln.backend import register_backend

    register_backend()


_register_with_dynamo()
