"""A hybrid classical-quantum classifier trained with torch.optim, through `qfx.torch.TorchLayer`.

    pip install -e ".[torch,examples]"   # in the root of a qfx checkout (qfx is not on a package index)
    python examples/torch_hybrid.py [--epochs 30] [--out torch_hybrid.png]

The model is `Linear(2, 2) -> 2-qubit circuit -> Linear(3, 2)` on the "two moons" data set (made here
with NumPy). The circuit uploads its two inputs as RY angles before each of its layers (data
re-uploading) and returns <Z0>, <Z1> and <Z0 Z1>. Each mini-batch of inputs runs through the circuit as
one vmapped JAX call, forward and backward. The script prints the test accuracy and saves the loss curve
and the decision boundary as a PNG, and a drawing of the circuit next to it (`*_circuit.png`).
"""

import argparse
from pathlib import Path
import time

from matplotlib.figure import Figure
import numpy as np
import torch
from tqdm import tqdm

import qfx
import qfx.torch

LAYERS = 3


def build(inputs, theta) -> qfx.Circuit:
    """The circuit of one sample: inputs (2,), theta (LAYERS, 2, 2)."""
    ops = []
    for layer in theta:
        ops += [qfx.RY(inputs[0], wires=0), qfx.RY(inputs[1], wires=1)]
        ops += [qfx.RX(layer[0, 0], wires=0), qfx.RX(layer[0, 1], wires=1), qfx.CNOT((0, 1))]
        ops += [qfx.RY(layer[1, 0], wires=0), qfx.RY(layer[1, 1], wires=1)]
    return qfx.Circuit(ops)


def circuit(inputs, theta, diff=qfx.diff.Backprop()):  # noqa: B008 - an immutable module, like a number
    """One sample: inputs (2,), theta (LAYERS, 2, 2) -> <Z0>, <Z1>, <Z0 Z1>."""
    return qfx.expval(build(inputs, theta), [qfx.Z(0), qfx.Z(1), qfx.Z(0) @ qfx.Z(1)], diff=diff)


def two_moons(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`n` points on two interleaved half circles, with Gaussian noise; labels 0 and 1."""
    angle = rng.uniform(0, np.pi, n)
    label = rng.integers(0, 2, n)
    x = np.where(label == 0, np.cos(angle), 1 - np.cos(angle))
    y = np.where(label == 0, np.sin(angle), 0.5 - np.sin(angle))
    points = np.stack([x, y], axis=1) + noise * rng.normal(size=(n, 2))
    points = (points - points.mean(0)) / points.std(0)  # standardised: angles of order one
    return points.astype(np.float32), label.astype(np.int64)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="torch_hybrid.png", help="where to save the plot")
    args = parser.parse_args()

    # torch's OpenMP workers busy-wait between ops and compete with XLA's CPU threads; this model's
    # classical layers are tiny, so one torch thread is the fast choice (several times faster here).
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    points, labels = two_moons(640, noise=0.2, rng=rng)
    x_train, y_train = torch.tensor(points[:512]), torch.tensor(labels[:512])
    x_test, y_test = torch.tensor(points[512:]), torch.tensor(labels[512:])
    train = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x_train, y_train),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,  # one batch shape: one compilation
    )

    quantum = qfx.torch.TorchLayer(circuit, {"theta": (LAYERS, 2, 2)}, diff=qfx.diff.Backprop())
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), quantum, torch.nn.Linear(3, 2))
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
    print(model)

    losses = []
    start = time.perf_counter()
    with tqdm(range(args.epochs), desc="training", unit="epoch") as bar:
        for _ in bar:
            total = 0.0
            for xb, yb in train:
                optimiser.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
                loss.backward()
                optimiser.step()
                total += loss.item()
            losses.append(total / len(train))
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    seconds = time.perf_counter() - start

    with torch.no_grad():
        train_accuracy = (model(x_train).argmax(1) == y_train).float().mean().item()
        test_accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"trained {args.epochs} epochs in {seconds:.1f} s (compilation included)")
    print(f"train accuracy: {train_accuracy:.3f}")
    print(f"test accuracy:  {test_accuracy:.3f}")

    # The decision boundary: the model's probability of class 1 on a grid, all points in one call.
    lo, hi = points.min(0) - 0.5, points.max(0) + 0.5
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], 80), np.linspace(lo[1], hi[1], 80))
    grid = torch.tensor(np.stack([gx.ravel(), gy.ravel()], axis=1), dtype=torch.float32)
    with torch.no_grad():
        p1 = torch.softmax(model(grid), dim=1)[:, 1].numpy().reshape(gx.shape)

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    ax_loss, ax_map = fig.subplots(1, 2)
    ax_loss.plot(np.arange(1, len(losses) + 1), losses)
    ax_loss.set(xlabel="epoch", ylabel="training loss (cross-entropy)", title="Loss")
    contour = ax_map.contourf(gx, gy, p1, levels=20, cmap="RdBu_r", vmin=0, vmax=1)
    ax_map.contour(gx, gy, p1, levels=[0.5], colors="k", linewidths=1.5)
    for label, marker in ((0, "o"), (1, "s")):
        sel = labels[512:] == label
        ax_map.scatter(*points[512:][sel].T, marker=marker, edgecolors="k", c="C1" if label else "C0", s=25)
    ax_map.set(title=f"Decision boundary, test accuracy {test_accuracy:.1%}", xlabel="x1", ylabel="x2")
    fig.colorbar(contour, ax=ax_map, label="P(class 1)")
    fig.savefig(args.out, dpi=120)
    print(f"saved {args.out}")
    # The circuit's structure (its angles are data and weights: not shown), next to the plot.
    drawing = Path(args.out).with_name(Path(args.out).stem + "_circuit.png")
    qfx.draw_mpl(build(np.zeros(2), np.zeros((LAYERS, 2, 2))), decimals=None).savefig(drawing, dpi=100)
    print(f"saved {drawing}")


if __name__ == "__main__":
    main()
