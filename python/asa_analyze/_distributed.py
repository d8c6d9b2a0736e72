"""What `Monitor` needs from a model that several processes train (torchrun, accelerate,
Lightning, the HF Trainer): the rank, one decision every rank follows, the model inside its
wrappers, and its full weights on rank 0's host.

Every rank calls the Monitor at the same steps (training loops are lock-step), so every rank
makes the same collective calls in the same order: rank 0 decides whether a step is analysed
and broadcasts it; the ranks agree that each can read the model before any gathers; then the
full state reaches rank 0's host memory (`get_model_state_dict(full_state_dict=True,
cpu_offload=True)` for FSDP, FSDP2 and tensor parallel, one tensor at a time; a replicated
model's own copy for DDP, no collective). A job that is not distributed never touches
torch.distributed.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional, Tuple

def world() -> Optional[Tuple[int, int]]:
    """(rank, world size) when torch.distributed is initialised with more than one process,
    else None (torch is not imported for it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.get_rank(), dist.get_world_size()


def unwrap(model: Any) -> Any:
    """The module inside DDP / DataParallel / torch.compile wrappers (any nesting), the one
    with the transformers `config`. DeepSpeed ZeRO-3's partitioned parameters are refused:
    their gather (`GatheredParameters`) is not implemented."""
    for _ in range(8):
        # torch.compile's wrapper forwards `config` to the model inside: look for it first
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif not hasattr(model, "config") and hasattr(model, "module"):
            model = model.module
        else:
            break
    if not hasattr(model, "config"):
        raise TypeError(f"{type(model).__name__} has no transformers config inside it (unwrapped: module, _orig_mod)")
    if any(hasattr(p, "ds_id") for p in model.parameters()):
        raise TypeError("DeepSpeed ZeRO-3 partitions its parameters; gathering them is not implemented")
    return model


def sharded(model: Any) -> bool:
    """Whether some parameter lives on another rank: FSDP's flat parameters, or DTensor
    parameters (FSDP2, tensor parallel)."""
    from torch.distributed.tensor import DTensor

    for module in model.modules():
        if type(module).__name__ == "FullyShardedDataParallel":
            return True
    return any(isinstance(p, DTensor) for p in model.parameters())


def broadcast(value: Any) -> Any:
    """Rank 0's `value` on every rank."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_agree(ok: bool) -> bool:
    """True on every rank when `ok` is true on every rank."""
    import torch.distributed as dist

    flags = [None] * dist.get_world_size()
    dist.all_gather_object(flags, bool(ok))
    return all(flags)


def full_state(model: Any, inner: Any, rank: int) -> Dict[str, Any]:
    """The full state dict on rank 0's host (an empty dict on the others). Sharded models gather (a collective on every rank), each tensor
    offloaded to the host as it arrives; a replicated model is copied on rank 0 alone."""
    if sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(model, options=options)
        # a tensor no rank shards comes back as itself on a CPU job: copied, as training
        # goes on changing it while the copy is analysed
        live = {t.data_ptr() for t in list(model.parameters()) + list(model.buffers())}
        state = {k: v.clone() if v.data_ptr() in live else v for k, v in state.items()}
    elif rank == 0:
        state = {k: v.detach().to("cpu", copy=True) for k, v in inner.state_dict().items()}
    else:
        state = {}
    return state if rank == 0 else {}
