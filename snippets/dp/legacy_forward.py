"""Old idioms to migrate, not to copy: Variable(t) (write t or
t.detach().requires_grad_()) and t.type(torch.cuda.FloatTensor) (write
t.to(x.device, torch.float32))."""

import argparse

import torch
from torch.autograd import Variable

argparse.ArgumentParser(description=__doc__).parse_args()

# --8<-- [start:variable]
t = torch.ones(2, 3)
v = Variable(t)  # old: since PyTorch 0.4 this returns a plain tensor; write t
print("Variable(t) is a", type(v).__name__,
      "| same memory as t:", v.data_ptr() == t.data_ptr())
print("isinstance(t, Variable) for any tensor t:", isinstance(t, Variable))
w = Variable(t, requires_grad=True)  # old; write t.detach().requires_grad_()
print("Variable(t, requires_grad=True):", w.requires_grad, "| t:", t.requires_grad)
# --8<-- [end:variable]

# --8<-- [start:type]
# .type(torch.cuda.FloatTensor) names a device type, not a GPU: like .cuda(), it
# copies to the current GPU, which each DataParallel thread sets to its replica's
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        with torch.cuda.device(i):  # what parallel_apply does in replica i's thread
            a, b = t.type(torch.cuda.FloatTensor), t.cuda()
        print(f"current GPU {i}: .type(...) on {a.device}, .cuda() on {b.device}")
else:
    try:
        t.type(torch.cuda.FloatTensor)
    except (RuntimeError, AssertionError) as e:
        print("no GPU here, so no copy:", str(e).split(".")[0])
# --8<-- [end:type]
