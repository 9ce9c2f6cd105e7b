"""What the fork server of ``pagerun.warmpool`` imports once, before forking each program.

Only imports: no tensor is made, no thread pool is started, and CUDA is never initialised (a
CUDA context cannot survive a fork).
"""

import argparse  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401
import torch.distributed  # noqa: F401
import torch.nn  # noqa: F401
import torch.utils.data  # noqa: F401
