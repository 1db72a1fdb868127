#!/usr/bin/env python3
"""The main job (configs/fashion_mnist.toml) written with MosaicML Composer, for timing baton against.

What a Composer user writes for it: Composer's Trainer, its EMA and ChannelsLast algorithms, its cosine-with-warmup
scheduler, its evaluation each epoch and its checkpoints each epoch (keeping the last three), around the same convnet
as bench/python_main_job.py (three conv-BatchNorm-ReLU-maxpool blocks of 32, 64, 128 channels without conv bias, a
128-unit hidden layer) wrapped in ComposerClassifier, on the same data (Debian's Fashion-MNIST IDX files, normalised
by 0.2860 / 0.3530, shuffled each epoch, batches of 128 with the last partial batch kept, evaluation in batches of
1000), with SGD (lr 0.05, momentum 0.9, weight decay 1e-3), warmup 200 batches, cosine to 2 % of the peak, the EMA's
half life 350 batches, updated every batch from the start of epoch 5, evaluated with the EMA weights.

Precision fp32 on the CPU, where Composer refuses amp_bf16 (--precision amp_bf16 --device gpu on a GPU). The batches are gathered from in-memory tensors one batch
at a time (the dataset's __getitems__), as a user who cares about speed writes it; per-sample indexing and
collation would cost Composer several seconds an epoch that baton's loader does not spend.

Prints Composer's console log each epoch and, last, `RESULT train_s=<seconds> ema_accuracy=<a>` (train_s: the
Trainer's construction and fit; the process's wall time is what bench/composer_vs_baton.sh compares).
"""
import argparse
import time

import torch

# The model and the data as the hand-written loop has them: one definition for both jobs.
from python_main_job import ConvNet, load


class Tensors(torch.utils.data.Dataset):
    """Images and labels in memory; the DataLoader asks for a whole batch's indices at once (__getitems__)."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __getitems__(self, indices):
        index = torch.as_tensor(indices)
        return self.images[index], self.labels[index]


def whole_batch(batch):
    return list(batch)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--out", default="runs/composer_main_job", help="checkpoint folder")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="cpu", help="Composer's device: cpu or gpu")
    p.add_argument("--precision", default="fp32", help="Composer's precision: fp32, or amp_bf16 on a GPU")
    args = p.parse_args()

    started = time.perf_counter()
    from composer import Trainer
    from composer.algorithms import EMA, ChannelsLast
    from composer.models import ComposerClassifier
    from composer.optim import CosineAnnealingWithWarmupScheduler

    torch.manual_seed(args.seed)
    train = Tensors(*load(args.data, "train"))
    test = Tensors(*load(args.data, "t10k"))
    train_loader = torch.utils.data.DataLoader(train, batch_size=128, shuffle=True, drop_last=False,
                                               collate_fn=whole_batch)
    eval_loader = torch.utils.data.DataLoader(test, batch_size=1000, shuffle=False, collate_fn=whole_batch)

    model = ComposerClassifier(ConvNet(), num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    trainer = Trainer(
        model=model,
        train_dataloader=train_loader,
        eval_dataloader=eval_loader,
        max_duration=f"{args.epochs}ep",
        eval_interval="1ep",
        optimizers=optimizer,
        schedulers=CosineAnnealingWithWarmupScheduler(t_warmup="200ba", alpha_f=0.02),
        algorithms=[EMA(half_life="350ba", update_interval="1ba", ema_start=f"{min(4, args.epochs - 1)}ep"),
                    ChannelsLast()],
        device=args.device,
        precision=args.precision,
        seed=args.seed,
        save_folder=args.out,
        save_interval="1ep",
        save_num_checkpoints_to_keep=3,
        save_overwrite=True,
        progress_bar=False,
        log_to_console=True,
        console_log_interval="1ep",
    )
    trainer.fit()
    accuracy = trainer.state.eval_metrics["eval"]["MulticlassAccuracy"].compute().item()
    print(f"RESULT train_s={time.perf_counter() - started:.2f} ema_accuracy={accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
