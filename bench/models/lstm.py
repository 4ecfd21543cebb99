"""LSTM language model: PyTorch's word_language_model example (embedding, a 2-layer
nn.LSTM with dropout, dropout, a linear decoder, log_softmax + nll_loss, truncated BPTT
with the hidden state detached between batches, clip_grad_norm_(0.25), SGD) on a random
token stream batchified on the device. Needs nn.LSTM: where the framework has none the
cells read "missing: nn.LSTM".
"""

import numpy as np

from common import uniform_fan_in, weights_like
from compat import require

SIZES = {
    "gpu": dict(ntoken=10000, ninp=650, nhid=650, nlayers=2, batch_size=20, bptt=35),
    "cpu": dict(ntoken=1000, ninp=128, nhid=128, nlayers=2, batch_size=20, bptt=35),
}
TOKENS = 200_000


def define(fw):
    nn, F = fw.nn, fw.nn.functional
    lstm = require(fw, nn, "LSTM", "nn.LSTM (lands with the api branch, issue 14)")

    class RNNModel(nn.Module):
        def __init__(self, ntoken, ninp, nhid, nlayers, dropout):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = lstm(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.nhid, self.nlayers = nhid, nlayers

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output).view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros((self.nlayers, bsz, self.nhid)),
                    weight.new_zeros((self.nlayers, bsz, self.nhid)))

    return RNNModel


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


class Train:
    def __init__(self, fw, device, size="cpu", dropout=0.2, seed=1337, lr=20.0):
        fw.manual_seed(seed)
        self.fw, self.device = fw, device
        c = SIZES[size]
        self.c = c
        self.model = define(fw)(c["ntoken"], c["ninp"], c["nhid"], c["nlayers"], dropout)
        weights_like(fw, self.model, uniform_fan_in, seed)
        self.model.to(device)
        self.model.train()
        self.forward = self.model
        self.optimizer = fw.optim.SGD(self.model.parameters(), lr=lr)
        stream = np.random.default_rng(seed + 1).integers(0, c["ntoken"], TOKENS).astype(np.int64)
        nbatch = TOKENS // c["batch_size"]  # batchify: [seq, batch] on the device
        data = stream[:nbatch * c["batch_size"]].reshape(c["batch_size"], -1).T.copy()
        self.data = fw.from_numpy(data).to(device)
        self.hidden = self.model.init_hidden(c["batch_size"])
        self.i = 0

    def compile(self, fn):
        self.forward = fn(self.model)

    def get_batch(self):
        bptt = self.c["bptt"]
        if self.i + 1 + bptt > self.data.size(0):
            self.i = 0
        data = self.data[self.i:self.i + bptt]
        target = self.data[self.i + 1:self.i + 1 + bptt].reshape(-1)
        self.i += bptt
        return data, target

    def step(self):
        data, targets = self.get_batch()
        self.hidden = repackage_hidden(self.hidden)
        self.model.zero_grad()
        output, self.hidden = self.forward(data, self.hidden)
        loss = self.fw.nn.functional.nll_loss(output, targets)
        loss.backward()
        self.fw.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimizer.step()
        self.last = loss.item()
        return self.last

    def check_value(self):
        return self.last


def make(fw, device, size="cpu", **options):
    return Train(fw, device, size, **options)
