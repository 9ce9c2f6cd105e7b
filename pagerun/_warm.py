"""What the fork server of ``pagerun.warmpool`` imports once, before forking each program.

Only imports: no tensor is made, no thread pool is started, and CUDA is never initialised (a
CUDA context cannot survive a fork). Besides torch itself, the distributed packages the
model-parallel programs use and Dynamo: each costs a worker 0.5 to 1 s of CPU to import.
Programs whose environment changes what these modules read at import time (``TORCH_LOGS``,
``TORCHDYNAMO_*``, ``TORCHINDUCTOR_*``) start as fresh interpreters instead (see IMPORT_TIME_ENV).
"""

import argparse  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401
import torch.distributed  # noqa: F401
import torch.distributed.checkpoint  # noqa: F401
import torch.distributed.checkpoint.state_dict  # noqa: F401
import torch.distributed.fsdp  # noqa: F401
import torch.distributed.pipelining  # noqa: F401
import torch.distributed.run  # noqa: F401
import torch.distributed.tensor  # noqa: F401
import torch.distributed.tensor.parallel  # noqa: F401
import torch.nn  # noqa: F401
import torch.utils.data  # noqa: F401

# environment variables read when those modules are imported
IMPORT_TIME_ENV = ("TORCH_LOGS", "TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_")
