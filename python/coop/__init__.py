"""coop: a fragmentation-aware GPU memory allocator (Python side).

- ``coop.native``: ctypes binding of libcoop's statistics / walk API and of
  the PyTorch ABI (no torch needed).
- ``coop.torch``: use coop as PyTorch's CUDA allocator, with memory_stats()
  and snapshot() in torch's formats.
"""

# Not "torch": "from coop import *" would bind the name torch to coop.torch,
# hiding the torch module the program imported.
__all__ = ["native"]
__version__ = "0.1.0"
