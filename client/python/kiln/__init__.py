"""Kiln's trainer side: capture of AOTAutograd graphs into Kiln's graph format.

Importing this package needs nothing but the standard library; the parts that need PyTorch
import it when they are used.
"""

import pkgutil

# The generated kiln.v1 modules may live in another folder named kiln on the path (a build
# tree); they join this package.
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.1.0"
