"""Kiln's trainer side: capture of AOTAutograd graphs into Kiln's graph format.

Importing this package needs nothing but the standard library; the parts that need PyTorch
import it when they are used.
"""

__version__ = "0.1.0"
