"""parallel.py: data parallelism over several processes with torch.distributed, started by torchrun.

    torchrun --nproc_per_node=4 text2grad.py ...        # 4 GPUs (or 4 CPU processes) of one machine

Without torchrun (no WORLD_SIZE in the environment) every function here is a no-op, and a run is
the one process it always was. Under torchrun:

    - every process (rank) runs the whole experiment, but draws its own training batches and samples
      its own rollouts (seeds offset by the rank);
    - the training steps of SFT, the reward models and PPO go through DistributedDataParallel, which
      averages the gradients over the ranks during backward, so every rank takes the same step and
      the weights stay identical; the few statistics that steer PPO (the advantage whitening, the
      ratio check, the adaptive KL coefficient) are averaged over ranks too;
    - rank 0 alone writes files, prints and shows progress bars; the others wait for each file
      before going on, so that all of them read the same files;
    - evaluation and annotation are not split: each rank computes the same thing.

A rank's loss is a mean over its own tokens, and DDP averages those means: with an equal number of
tokens per rank this is exactly the step one process would take on the combined batch (the test
checks it); with unequal numbers, ranks with fewer tokens weigh a little more, as in any DDP code.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def active():
    return dist.is_available() and dist.is_initialized()


def rank():
    return dist.get_rank() if active() else 0


def world_size():
    return dist.get_world_size() if active() else 1


def main_process():
    return rank() == 0


def init(device):
    """Join the process group when started by torchrun (NCCL on CUDA, gloo on CPU), once; returns
    the device this rank uses (its own GPU: cuda:LOCAL_RANK). Ranks other than 0 stop printing."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not active():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        if not main_process():
            sys.stdout = open(os.devnull, "w")
    return device


def wrap(model):
    """The module the training step calls: DistributedDataParallel around model under torchrun,
    model itself otherwise. Both share model's parameters."""
    return DistributedDataParallel(model) if active() else model


def all_sum(x):
    """x (a tensor) summed over ranks; x itself with one process."""
    if not active():
        return x
    x = x.clone()
    dist.all_reduce(x)
    return x


def all_mean(x):
    return all_sum(x) / world_size()


def any_rank(flag):
    """True on every rank if flag (a bool) is True on any rank: decisions that change the control
    flow (stop, skip, NaN) must be the same everywhere, or the next collective call would hang."""
    if not active():
        return flag
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    return all_sum(torch.tensor(float(flag), device=device)).item() > 0


def barrier():
    """Wait until every rank gets here (after rank 0 wrote a file the others will read)."""
    if active():
        dist.barrier()
