#!/usr/bin/env python3
"""torchrun, for a PyTorch built without libuv (Debian 13's python3-torch 2.6).

PyTorch 2.4 made libuv its TCPStore's default, but Debian builds PyTorch without libuv, so Debian 13's own torchrun
fails before it starts a worker ("use_libuv was requested but PyTorch was build without libuv support"). This runs
the same torchrun with the plain-socket store as the default. Arguments are torchrun's:

    scripts/torchrun-without-libuv.py --nproc_per_node 2 --no_python build/bin/baton train cfg.toml
"""
import sys

import torch.distributed as dist

_TCPStore = dist.TCPStore


class TCPStore(_TCPStore):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        super().__init__(*args, **kwargs)


# Before torchrun's modules take their own reference to it.
dist.TCPStore = TCPStore

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
