"""CNN classifier: the network of PyTorch's MNIST example (two 3x3 convolutions, max
pooling, dropout 0.25 / 0.5, two linear layers, log_softmax + nll_loss), trained with
Adam (the example's Adadelta is not in kiln.optim yet) on MNIST-like random images:
normalized 28x28 grey images and labels 0-9, a new batch from the host every step as a
DataLoader hands them in, the loss read every step.
"""

import numpy as np

from common import uniform_fan_in, weights_like

SIZES = {"gpu": dict(batch_size=128), "cpu": dict(batch_size=32)}


def define(fw):
    nn, F = fw.nn, fw.nn.functional

    class Net(nn.Module):
        def __init__(self, dropout=True):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout(0.25 if dropout else 0.0)
            self.dropout2 = nn.Dropout(0.5 if dropout else 0.0)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = self.conv1(x)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = fw.flatten(x, 1)
            x = self.fc1(x)
            x = F.relu(x)
            x = self.dropout2(x)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    return Net


class Train:
    def __init__(self, fw, device, size="cpu", dropout=True, batches=4, seed=1337, lr=1e-3):
        fw.manual_seed(seed)
        self.fw, self.device = fw, device
        self.model = define(fw)(dropout)
        weights_like(fw, self.model, uniform_fan_in, seed)
        self.model.to(device)
        self.model.train()
        self.forward = self.model
        self.optimizer = fw.optim.Adam(self.model.parameters(), lr=lr)
        rng = np.random.default_rng(seed)
        n = SIZES[size]["batch_size"]
        self.batches = [(((rng.uniform(0, 1, (n, 1, 28, 28)) - 0.1307) / 0.3081).astype(np.float32),
                         rng.integers(0, 10, n).astype(np.int64)) for _ in range(batches)]
        self.calls = 0

    def compile(self, fn):
        self.forward = fn(self.model)

    def step(self):
        x, y = self.batches[self.calls % len(self.batches)]
        self.calls += 1
        data, target = self.fw.from_numpy(x).to(self.device), self.fw.from_numpy(y).to(self.device)
        self.optimizer.zero_grad()
        output = self.forward(data)
        loss = self.fw.nn.functional.nll_loss(output, target)
        loss.backward()
        self.optimizer.step()
        self.last = loss.item()
        return self.last

    def check_value(self):
        return self.last


def make(fw, device, size="cpu", **options):
    return Train(fw, device, size, **options)
