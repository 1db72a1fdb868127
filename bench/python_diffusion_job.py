#!/usr/bin/env python3
"""The diffusion job's training (configs/fashion_mnist_ddpm.toml) written as a PyTorch user would write it, for timing
baton against.

The same U-Net as baton's `denoiser` model (plugins/diffusion/denoiser.cpp: widths 16, 32, 64 at 28, 14 and 7 pixels,
residual blocks of GroupNorm-SiLU-conv3x3 twice with the timestep's embedding added per channel, a 1x1 skip where the
width changes, strided 3x3 convolutions down and 2x2 transposed convolutions up, sinusoidal timestep features through
two linear layers), DDPM's objective (t uniform in 1..1000, x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) eps
with the linear beta schedule from 1e-4 to 0.02, the mean squared error of the predicted noise), images mapped to
[-1, 1], batches of 32 shuffled each epoch, Adam at lr 1e-3 after a linear warmup of 50 batches, an EMA of the
weights (half life 500 batches, updated every batch from batch 500) and a checkpoint (model, optimizer, EMA) every
1000 batches keeping the last two, as baton's run does with its evaluation off. The random timesteps and noise are
drawn on the device, as a PyTorch user writes it.

Prints a line per 1000 batches and, last, `RESULT train_s=<seconds> batches=<n> train_loss=<mean of the last 100>`.
"""
import argparse
import copy
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from python_main_job import read_idx, save_checkpoint


def group_norm(channels):
    return nn.GroupNorm(math.gcd(channels, 8), channels)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, embed):
        super().__init__()
        self.norm1, self.conv1 = group_norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(embed, cout)
        self.norm2, self.conv2 = group_norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, e):
        h = self.conv1(F.silu(self.norm1(x.float())))
        h = h + self.time(e)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h.float())))
        return h + (self.skip(x) if self.skip is not None else x)


class UNet(nn.Module):
    def __init__(self, channels=1, base=16):
        super().__init__()
        embed = 4 * base
        self.base = base
        self.embed1, self.embed2 = nn.Linear(base, embed), nn.Linear(embed, embed)
        self.inp = nn.Conv2d(channels, base, 3, padding=1)
        self.block1 = ResBlock(base, base, embed)
        self.down1 = nn.Conv2d(base, base, 3, stride=2, padding=1)
        self.block2 = ResBlock(base, 2 * base, embed)
        self.down2 = nn.Conv2d(2 * base, 2 * base, 3, stride=2, padding=1)
        self.block3 = ResBlock(2 * base, 4 * base, embed)
        self.middle = ResBlock(4 * base, 4 * base, embed)
        self.up2 = nn.ConvTranspose2d(4 * base, 4 * base, 2, stride=2)
        self.block4 = ResBlock(6 * base, 2 * base, embed)
        self.up1 = nn.ConvTranspose2d(2 * base, 2 * base, 2, stride=2)
        self.block5 = ResBlock(3 * base, base, embed)
        self.out_norm = group_norm(base)
        self.out = nn.Conv2d(base, channels, 3, padding=1)

    def forward(self, x, t):
        half = self.base // 2
        freqs = torch.exp(torch.arange(half, device=x.device, dtype=torch.float32) * (-math.log(10000.0) / half))
        angles = t.float()[:, None] * freqs[None, :]
        e = self.embed2(F.silu(self.embed1(torch.cat([angles.sin(), angles.cos()], 1))))
        h1 = self.block1(self.inp(x), e)
        h2 = self.block2(self.down1(h1), e)
        h = self.middle(self.block3(self.down2(h2), e), e)
        h = self.block4(torch.cat([self.up2(h), h2], 1), e)
        h = self.block5(torch.cat([self.up1(h), h1], 1), e)
        return self.out(F.silu(self.out_norm(h.float())))


def alphas_bar(steps=1000, device="cpu"):
    """alpha_bar_t for t = 0..T, DDPM's linear betas from 1e-4 to 0.02 over t = 1..T, in double."""
    betas = torch.linspace(1e-4, 0.02, steps, dtype=torch.float64)
    return torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(1 - betas, 0)]).float().to(device)


def load_unit(folder, device):
    """The training images in [-1, 1], [N, 1, 28, 28]."""
    images = read_idx(os.path.join(folder, "train-images-idx3-ubyte.gz")).float().div_(255.0)
    return images.mul_(2).sub_(1).unsqueeze(1).to(device)


class DiffusionLoss:
    """DDPM's training objective for a batch x0 in [-1, 1]: (prediction, noise) and their mean squared error."""

    def __init__(self, alpha_bar, timesteps=1000):
        self.alpha_bar, self.timesteps = alpha_bar, timesteps

    def outputs(self, net, x0):
        t = torch.randint(1, self.timesteps + 1, (x0.shape[0],), device=x0.device)
        noise = torch.randn_like(x0)
        ab = self.alpha_bar[t].view(-1, 1, 1, 1)
        return net(ab.sqrt() * x0 + (1 - ab).sqrt() * noise, t), noise

    @staticmethod
    def loss(prediction, noise):
        return F.mse_loss(prediction.float(), noise)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batches", type=int, default=6000)
    p.add_argument("--out", default="runs/python_diffusion_job", help="checkpoint folder")
    p.add_argument("--device", default="cpu", help="cpu or cuda: where the model and the data live")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    images = load_unit(args.data, device)
    batch_size, warmup, ema_start, half_life, save_every = 32, 50, 500, 500, 1000
    net = UNet().to(device)
    ema = copy.deepcopy(net)
    smoothing = 0.5 ** (1 / half_life)
    objective = DiffusionLoss(alphas_bar(device=device))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda b: min(1.0, (b + 1) / warmup))
    os.makedirs(args.out, exist_ok=True)

    losses = []
    start = time.perf_counter()
    batch = 0
    while batch < args.batches:
        order = torch.randperm(len(images), device=device)
        for i in range(0, len(images), batch_size):
            if batch == args.batches:
                break
            x0 = images[order[i:i + batch_size]]
            loss = objective.loss(*objective.outputs(net, x0))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            batch += 1
            if batch >= ema_start:
                with torch.no_grad():
                    if batch == ema_start:
                        ema.load_state_dict(net.state_dict())
                    else:
                        for a, w in zip(ema.parameters(), net.parameters()):
                            a.lerp_(w, 1 - smoothing)
            if batch > args.batches - 100:
                losses.append(loss.detach())
            if batch % save_every == 0:
                save_checkpoint(args.out, f"ba{batch}.pt", f"ba{batch - 2 * save_every}.pt", net, optimizer, ema)
                print(f"batch {batch}/{args.batches}: train/loss {loss.item():.4f} "
                      f"({time.perf_counter() - start:.1f} s)", flush=True)
    train_s = time.perf_counter() - start
    print(f"RESULT train_s={train_s:.2f} batches={batch} train_loss={torch.stack(losses).mean().item():.4f}")


if __name__ == "__main__":
    main()
