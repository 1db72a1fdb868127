#!/usr/bin/env python3
"""The main job (configs/fashion_mnist.toml) written as a PyTorch user would write it, for timing baton against.

The same convnet (three conv-BatchNorm-ReLU-maxpool blocks of 32, 64, 128 channels without conv bias, a 128-unit
hidden layer), the same data (Debian's Fashion-MNIST IDX files, normalised by 0.2860 / 0.3530, a fresh permutation
per epoch, the last partial batch kept), SGD (lr 0.05, momentum 0.9, weight decay 1e-3) under a cosine schedule with a
linear warmup of 200 batches down to 2 % of the peak, bf16 autocast for the forward pass and the loss with
channels-last weights and batches, an EMA of the weights and BatchNorm buffers (half life 350 batches, updated every
batch, started at the first batch of epoch 5), both weight sets evaluated after each epoch, and a checkpoint (model,
optimizer, EMA) written after each epoch, keeping the last three, as baton's run does.

Prints one line per epoch and, last, `RESULT train_s=<seconds> ema_accuracy=<a> raw_accuracy=<a>`. With
--steps-only, the training steps alone (no EMA, evaluation or checkpoints), the floor that baton's run and this one
share: `RESULT steps_s=<seconds> train_loss=<l>`.
"""
import argparse
import copy
import gzip
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(folder, split):
    images = read_idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz")).float().div_(255.0)
    labels = read_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz")).long()
    images = images.sub_(0.2860).div_(0.3530).unsqueeze(1)
    return images, labels


class ConvNet(nn.Module):
    def __init__(self, widths=(32, 64, 128), hidden=128, classes=10):
        super().__init__()
        layers, channels, size = [], 1, 28
        for width in widths:
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                       nn.MaxPool2d(2)]
            channels, size = width, size // 2
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(channels * size * size, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def lr_factor(batch, total, warmup=200, floor=0.02):
    """Batch `batch` (0-based) trains at (batch + 1) / warmup during the warmup, then on a cosine from 1 to floor."""
    if batch < warmup:
        return (batch + 1) / warmup
    t = (batch - warmup) / max(1, total - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))


def save_checkpoint(folder, name, stale, model, optimizer, ema):
    """Model, optimizer and EMA in folder/name, written whole (a temporary file renamed), and folder/stale removed."""
    path = os.path.join(folder, name)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ema": ema.state_dict()},
               path + ".tmp")
    os.replace(path + ".tmp", path)
    if os.path.exists(os.path.join(folder, stale)):
        os.remove(os.path.join(folder, stale))


def evaluate(model, images, labels, batch_size, channels_last, autocast):
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad(), autocast():
        for i in range(0, len(images), batch_size):
            x = images[i:i + batch_size]
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            y = labels[i:i + batch_size]
            out = model(x)
            loss_sum += F.cross_entropy(out.float(), y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    model.train()
    return loss_sum / len(images), correct / len(images)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--ema-start-epoch", type=int, default=4, help="epochs completed before the average starts")
    p.add_argument("--half-life", type=int, default=350, help="the EMA's half life in batches")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="cross entropy's label smoothing")
    p.add_argument("--out", default="runs/python_main_job", help="checkpoint folder")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0: one per core, as baton")
    p.add_argument("--device", default="cpu", help="cpu or cuda: where the model and the data live")
    p.add_argument("--precision", default="amp_bf16", choices=["amp_bf16", "fp32"],
                   help="bf16 autocast for the forward pass and the loss (as baton's amp_bf16), or none")
    p.add_argument("--steps-only", action="store_true",
                   help="the training steps alone (no EMA, evaluation or checkpoints): the floor both jobs share")
    args = p.parse_args()

    torch.manual_seed(42)
    torch.set_num_threads(args.threads or os.cpu_count())
    device = torch.device(args.device)
    train_x, train_y = (t.to(device) for t in load(args.data, "train"))
    test_x, test_y = (t.to(device) for t in load(args.data, "t10k"))

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "amp_bf16")
    batch_size, eval_batch_size = 128, 1000
    batches_per_epoch = math.ceil(len(train_x) / batch_size)
    total = batches_per_epoch * args.epochs

    model = ConvNet().to(device, memory_format=torch.channels_last)
    ema = copy.deepcopy(model)
    ema_started = False
    smoothing = 0.5 ** (1 / args.half_life)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda b: lr_factor(b, total))
    generator = torch.Generator().manual_seed(42)
    os.makedirs(args.out, exist_ok=True)

    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_x), generator=generator).to(device)
        for i in range(0, len(train_x), batch_size):
            idx = order[i:i + batch_size]
            x = train_x[idx].contiguous(memory_format=torch.channels_last)
            y = train_y[idx]
            with autocast():
                loss = F.cross_entropy(model(x), y, label_smoothing=args.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            if epoch >= args.ema_start_epoch and not args.steps_only:
                with torch.no_grad():
                    ema_state, state = ema.state_dict(), model.state_dict()
                    if not ema_started:
                        for k, v in state.items():
                            ema_state[k].copy_(v)
                        ema_started = True
                    else:
                        for k, v in state.items():
                            if v.is_floating_point():
                                ema_state[k].lerp_(v, 1 - smoothing)
                            else:
                                ema_state[k].copy_(v)
        if args.steps_only:
            print(f"epoch {epoch + 1}/{args.epochs}: train/loss {loss.item():.4f} "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
            continue
        ema_loss, ema_acc = evaluate(ema if ema_started else model, test_x, test_y, eval_batch_size, True, autocast)
        raw_loss, raw_acc = evaluate(model, test_x, test_y, eval_batch_size, True, autocast)
        print(f"epoch {epoch + 1}/{args.epochs}: train/loss {loss.item():.4f} eval/accuracy {ema_acc:.4f} "
              f"eval_raw/accuracy {raw_acc:.4f} ({time.perf_counter() - start:.1f} s)", flush=True)
        save_checkpoint(args.out, f"ep{epoch + 1}.pt", f"ep{epoch + 1 - 3}.pt", model, optimizer, ema)
    train_s = time.perf_counter() - start
    if args.steps_only:
        print(f"RESULT steps_s={train_s:.2f} train_loss={loss.item():.4f}")
        return
    print(f"RESULT train_s={train_s:.2f} ema_accuracy={ema_acc:.4f} raw_accuracy={raw_acc:.4f}")


if __name__ == "__main__":
    main()
