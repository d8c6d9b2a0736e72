"""One 2-rank training job for test_distributed.py, run under `torchrun --nproc_per_node 2`
(gloo, CPU): a tiny random Llama trained a few steps under `mode`, with the Monitor (or a
callback) asked at every step on every rank, then a final request. Rank 0 writes
`result.json` into `out`: the last analysed step, the largest difference between its series
rows and `asa_analyze.analyze` of the full state gathered at that step written as a
checkpoint, the warnings the Monitor gave, and the gathers.

    torchrun --nproc_per_node 2 --standalone distributed_job.py MODE OUT

MODE: ddp, fsdp, fsdp2, tp (the plain-loop Monitor), unreadable (a model without a
transformers config: the Monitor turns itself off), trainer (the HF Trainer callback under
DDP), lightning (the Lightning callback, strategy ddp), capture_ddp, capture_fsdp, capture_fsdp2
(the Monitor capturing each rank's own training batch: rank 0's series at the last step
must equal one process's capture of both ranks' batches, rank 0's first, with the weights
of that step).
"""

import json
import os
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

import asa_analyze as asa

METRICS = ["first_token", "entropy", "max_logit", "weight_sum", "qk_mean"]
STEPS = 4
PROBE = [[(7 * i + 3 * j) % 64 for j in range(16)] for i in range(2)]


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg)


def wrap(model, mode):
    if mode in ("ddp", "unreadable"):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    if mode == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, device_id=torch.device("cpu"))
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        return fully_shard(model)
    if mode == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = {}
        for i in range(len(model.model.layers)):
            plan[f"model.layers.{i}.mlp.gate_proj"] = ColwiseParallel()
            plan[f"model.layers.{i}.mlp.up_proj"] = ColwiseParallel()
            plan[f"model.layers.{i}.mlp.down_proj"] = RowwiseParallel()
        return parallelize_module(model, init_device_mesh("cpu", (2,)), plan)
    raise ValueError(mode)


def batch(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randint(0, 64, (2, 16), generator=g)


def full_state(model, mode):
    """The full state on rank 0, gathered independently of the Monitor."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if mode == "ddp":
        return {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def compare(series, state, config, out):
    """Largest |difference| between the series' rows of its last step and the analysis of
    `state` written as a checkpoint."""
    import polars as pl
    from safetensors.torch import save_file

    ckpt = Path(out) / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(ckpt / "model.safetensors"))
    config.to_json_file(str(ckpt / "config.json"))
    last = series["step"].max()
    res = asa.analyze({"model": str(ckpt)}, corpus=PROBE, metrics=METRICS, seq_len=16, num_seqs=2,
                      progress=False)
    keys = ["metric", "layer", "head", "stat"]
    got = series.filter(pl.col("step") == last).select(*keys, pl.col("value").alias("got"))
    want = res.attention.select(*keys, pl.col("value").alias("want"))
    joined = want.join(got, on=keys, how="left", nulls_equal=True)
    assert joined.height == want.height and joined["got"].null_count() == 0, joined
    worst = (joined["got"] - joined["want"]).abs().max()
    return int(last), float(worst), want.height


def plain_loop(mode, rank, out):
    model = tiny_llama()
    config = model.config
    trained = wrap(model, mode)
    watched = torch.nn.Linear(4, 4) if mode == "unreadable" else trained
    if mode == "unreadable":
        from torch.nn.parallel import DistributedDataParallel

        watched = DistributedDataParallel(watched)
    mon = asa.Monitor(probe=PROBE, every=1, metrics=METRICS)
    opt = torch.optim.SGD(trained.parameters(), lr=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(1, STEPS + 1):
            ids = batch(step, rank)
            trained(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
            mon(watched, step)
        mon.wait()
        mon.request(watched, STEPS)
        mon.wait()
    state = full_state(trained, mode if mode != "unreadable" else "ddp")
    result = {"rank": rank, "warnings": [str(w.message) for w in caught if "asa_analyze" in str(w.message)],
              "disabled": mon.disabled, "skipped": mon.skipped, "gathers": mon.gathers,
              "world_size": dist.get_world_size(), "wrapper": type(trained).__name__}
    if rank == 0 and mode != "unreadable":
        result["last_step"], result["worst"], result["rows"] = compare(mon.series, state, config, out)
    return result


def trainer_job(rank, out):
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    from asa_analyze.callbacks import AttentionStats

    class Random(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            ids = batch(i, 0)[0]
            return {"input_ids": ids, "labels": ids}

    model = tiny_llama()
    cb = AttentionStats(probe=PROBE, every=1, metrics=METRICS, seq_len=16, num_seqs=2)
    args = TrainingArguments(output_dir=str(Path(out) / "trainer"), max_steps=STEPS, per_device_train_batch_size=2,
                             use_cpu=True, ddp_backend="gloo", report_to=[], save_strategy="no",
                             logging_steps=1, learning_rate=0.05, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Random(), callbacks=[cb])
    trainer.train()
    mon = cb._schedule.monitor
    mon.wait()
    mon.request(trainer.model_wrapped, STEPS)
    mon.wait()
    state = full_state(trainer.model_wrapped, "ddp")
    result = {"rank": rank, "skipped": mon.skipped, "gathers": mon.gathers, "disabled": mon.disabled,
              "warnings": [], "world_size": trainer.args.world_size,
              "wrapper": type(trainer.model_wrapped).__name__}
    if rank == 0:
        result["last_step"], result["worst"], result["rows"] = compare(cb.series, state, model.config, out)
    return result


def lightning_job(rank, out):
    import lightning.pytorch as L
    from torch.utils.data import DataLoader

    from asa_analyze.callbacks import LightningAttentionStats

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = tiny_llama()

        def training_step(self, ids, _):
            return self.model(input_ids=ids, labels=ids).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    module = Module()
    data = DataLoader([batch(i, 0)[0] for i in range(32)], batch_size=2)
    cb = LightningAttentionStats(probe=PROBE, every=1, metrics=METRICS, seq_len=16, num_seqs=2)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=STEPS, callbacks=[cb],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, data)
    mon = cb._schedule.monitor
    mon.wait()
    mon.request(module.model, STEPS + 1)
    mon.wait()
    state = {k: v.detach().clone() for k, v in module.model.state_dict().items()}
    result = {"rank": rank, "skipped": mon.skipped, "gathers": mon.gathers, "disabled": mon.disabled,
              "warnings": [], "world_size": trainer.world_size, "wrapper": type(trainer.strategy).__name__}
    if rank == 0:
        result["last_step"], result["worst"], result["rows"] = compare(cb.series, state, module.model.config, out)
    return result


def capture_loop(mode, rank, out):
    """Each rank trains on its own batch under `mode` (ddp, fsdp, fsdp2), the Monitor
    capturing every step's forward."""
    import polars as pl

    model = tiny_llama()
    config = model.config
    trained = wrap(model, mode)
    mon = asa.Monitor(every=1, metrics=METRICS)
    opt = torch.optim.SGD(trained.parameters(), lr=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(1, STEPS + 1):
            ids = batch(step, rank)
            before = full_state(trained, mode)  # every rank: a collective when sharded
            with mon.capture(trained, step):
                loss = trained(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    result = {"rank": rank, "warnings": [str(w.message) for w in caught if "asa_analyze" in str(w.message)],
              "disabled": mon.disabled, "world_size": dist.get_world_size(), "wrapper": type(trained).__name__,
              "steps": sorted(set(mon.series["step"].to_list()))}
    if rank == 0:
        # one process, the weights of the last step, both ranks' batches (rank 0's first)
        from transformers import LlamaForCausalLM

        alone = LlamaForCausalLM(config).eval()
        alone.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in before.items()})
        both = torch.cat([batch(STEPS, 0), batch(STEPS, 1)])
        with torch.no_grad(), asa.capture(alone, metrics=METRICS) as cap:
            alone(input_ids=both, use_cache=False)
        keys = ["metric", "layer", "head", "stat"]
        want = cap.result().attention.select(*keys, pl.col("value").alias("want"))
        got = mon.series.filter(pl.col("step") == STEPS).select(*keys, pl.col("value").alias("got"))
        joined = want.join(got, on=keys, how="left", nulls_equal=True)
        assert joined.height == want.height and joined["got"].null_count() == 0, joined
        result["worst"] = float((joined["got"] - joined["want"]).abs().max())
        result["rows"] = want.height
        result["std_rows"] = int(want.filter(pl.col("stat") == "std").height)
    return result


def main():
    mode, out = sys.argv[1], sys.argv[2]
    if mode != "lightning":
        dist.init_process_group("gloo")
    if mode == "trainer":
        rank = int(os.environ["RANK"])
        result = trainer_job(rank, out)
    elif mode == "lightning":
        rank = int(os.environ["RANK"])
        result = lightning_job(rank, out)
    elif mode.startswith("capture_"):
        rank = dist.get_rank()
        result = capture_loop(mode.removeprefix("capture_"), rank, out)
    else:
        rank = dist.get_rank()
        result = plain_loop(mode, rank, out)
    Path(out, f"result.{rank}.json").write_text(json.dumps(result, indent=2))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
