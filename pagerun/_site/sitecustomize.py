"""Which blocks used the GPU: on a GPU machine, every Python process a block starts says at exit
whether it held GPU memory, by leaving a file in the folder ``PAGERUN_CUDA_MARK`` names
(``pagerun.runner.run``). A recording's ``ran on`` header comes from it: a block whose processes
never held GPU memory ran on the GPU machine's CPU (gloo ranks on the host, a program that fell
back), and its GPU tab says so.

Fresh interpreters load this file as ``sitecustomize`` (the runner puts its folder first on
``PYTHONPATH``, on a GPU machine only); the fork server's children call ``mark_at_exit`` as they
start (``pagerun.warmpool``). Standard library only; it imports nothing a program does not, and
any other ``sitecustomize`` on the path still runs after it.
"""

import atexit
import os
import sys


def mark_at_exit(folder: str) -> None:
    """At exit: a file in ``folder`` if this process held GPU memory (torch's caching allocator
    reserved some), nothing otherwise. Registered first, so it runs after the program's own
    ``atexit`` functions; multiprocessing's spawn children exit through ``sys.exit`` and run it
    too."""
    def mark() -> None:
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized() \
                    and torch.cuda.max_memory_reserved() > 0:
                open(os.path.join(folder, f"cuda-{os.getpid()}"), "w").close()
        except Exception:  # noqa: BLE001 - never change how a program ends
            pass

    atexit.register(mark)


def _hand_over() -> None:
    """The interpreter's path as it would be without this folder on ``PYTHONPATH``, and any
    other ``sitecustomize`` (a distribution's, a virtual environment's) run as it would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None:
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)


if __name__ == "sitecustomize" and os.environ.get("PAGERUN_CUDA_MARK"):
    mark_at_exit(os.environ["PAGERUN_CUDA_MARK"])
    _hand_over()
