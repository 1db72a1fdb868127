#!/usr/bin/env python3
"""The Frechet distance of two feature files (one sample per line), computed independently of baton with numpy and
scipy: FD = |mu_r - mu_g|^2 + Tr(S_r + S_g - 2 sqrtm(S_r S_g)), covariances with N - 1 (as FID's reference code)."""
import sys

import numpy as np
from scipy import linalg


def main() -> None:
    real = np.loadtxt(sys.argv[1], dtype=np.float64, ndmin=2)
    generated = np.loadtxt(sys.argv[2], dtype=np.float64, ndmin=2)
    mu_r, mu_g = real.mean(axis=0), generated.mean(axis=0)
    s_r, s_g = np.cov(real, rowvar=False), np.cov(generated, rowvar=False)
    root, _ = linalg.sqrtm(s_r @ s_g, disp=False)
    fd = float(np.sum((mu_r - mu_g) ** 2) + np.trace(s_r) + np.trace(s_g) - 2 * np.trace(root.real))
    print(repr(fd))


if __name__ == "__main__":
    main()
