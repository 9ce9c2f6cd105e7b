"""What the fork server of ``pagerun.warmpool`` imports once, before forking each program.

Only imports: no tensor is made, no thread pool is started, and CUDA is never initialised (a
CUDA context cannot survive a fork). Besides torch itself, the distributed packages the
model-parallel programs use and Dynamo: each costs a worker 0.5 to 1 s of CPU to import. Also what
a process's first ``torch.compile`` imports (AOTAutograd, its partitioner, inductor's compile_fx,
which even the ``aot_eager`` backends import): about 1 s of the server's start, 1.3 s saved in each
process that compiles; the imports start no thread, no process and no CUDA.
Programs whose environment changes what these modules read at import time (``TORCH_LOGS``,
``TORCHDYNAMO_*``, ``TORCHINDUCTOR_*``, ``TORCH_CPP_LOG_LEVEL``, which c10 reads when torch's
library loads) start as fresh interpreters instead (see IMPORT_TIME_ENV).
"""

import argparse  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401
import torch._dynamo.backends.debugging  # noqa: F401
import torch._functorch.aot_autograd  # noqa: F401
import torch._functorch.partitioners  # noqa: F401
import torch._inductor.compile_fx  # noqa: F401
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
IMPORT_TIME_ENV = ("TORCH_LOGS", "TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_",
                   "TORCH_CPP_LOG_LEVEL")
