#!/usr/bin/env python3
"""The diffusion job's training (configs/fashion_mnist_ddpm.toml) written with MosaicML Composer, for timing baton
against.

What a Composer user writes for it: a ComposerModel around the U-Net of bench/python_diffusion_job.py (the same as
baton's `denoiser`) whose forward draws the timesteps and noise on the device and whose loss is DDPM's mean squared
error, Composer's Trainer with Adam at lr 1e-3 under its ConstantWithWarmupScheduler (50 batches), its EMA algorithm
(half life 500 batches, updated every batch from batch 500) and its checkpoints every 1000 batches keeping the last
two; batches of 32 shuffled each epoch, no evaluation (as baton's run in the comparison, with its evaluation off).

Prints Composer's console log and, last, `RESULT train_s=<seconds> batches=<n>` (train_s: the Trainer's construction
and fit; scripts/gpu-check.sh compares the process's wall time).
"""
import argparse
import time

import torch

from python_diffusion_job import DiffusionLoss, UNet, alphas_bar, load_unit


class Images(torch.utils.data.Dataset):
    """Images in memory; the DataLoader asks for a whole batch's indices at once (__getitems__)."""

    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i]

    def __getitems__(self, indices):
        return self.images[torch.as_tensor(indices)]


def whole_batch(batch):
    return batch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batches", type=int, default=6000)
    p.add_argument("--out", default="runs/composer_diffusion_job", help="checkpoint folder")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="cpu", help="Composer's device: cpu or gpu")
    p.add_argument("--precision", default="fp32", help="Composer's precision")
    args = p.parse_args()

    started = time.perf_counter()
    from composer import Trainer
    from composer.algorithms import EMA
    from composer.models import ComposerModel
    from composer.optim import ConstantWithWarmupScheduler

    class Denoiser(ComposerModel):
        def __init__(self):
            super().__init__()
            self.net = UNet()
            self.objective = None

        def forward(self, batch):
            if self.objective is None:
                self.objective = DiffusionLoss(alphas_bar(device=batch.device))
            return self.objective.outputs(self.net, batch)

        def loss(self, outputs, batch):
            return DiffusionLoss.loss(*outputs)

    torch.manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(Images(load_unit(args.data, "cpu")), batch_size=32, shuffle=True,
                                         drop_last=False, collate_fn=whole_batch)
    model = Denoiser()
    trainer = Trainer(
        model=model,
        train_dataloader=loader,
        max_duration=f"{args.batches}ba",
        optimizers=torch.optim.Adam(model.parameters(), lr=1e-3),
        schedulers=ConstantWithWarmupScheduler(t_warmup="50ba"),
        algorithms=[EMA(half_life="500ba", update_interval="1ba", ema_start="500ba")],
        device=args.device,
        precision=args.precision,
        seed=args.seed,
        save_folder=args.out,
        save_interval="1000ba",
        save_num_checkpoints_to_keep=2,
        save_overwrite=True,
        progress_bar=False,
        log_to_console=True,
        console_log_interval="1000ba",
    )
    trainer.fit()
    print(f"RESULT train_s={time.perf_counter() - started:.2f} batches={int(trainer.state.timestamp.batch)}",
          flush=True)


if __name__ == "__main__":
    main()
